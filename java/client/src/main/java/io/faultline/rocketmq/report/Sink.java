package io.faultline.rocketmq.report;

/**
 * Where a {@link Reporter} hands its records: one Kafka message each. {@link #offer} never
 * waits: it takes the record now (true) or refuses it (false, as a Kafka client whose queue is
 * full or that has no metadata yet), and the reporter keeps a refused record in its buffer and
 * hands it again later, before any newer one.
 */
public interface Sink {
    /**
     * Take one record, or refuse it without waiting.
     *
     * @param key the record's key: the producer id (a consumer's records: its group)
     * @param value the record's bytes ({@link WireJson#serialize})
     * @return whether the record was taken; a refused one is offered again later
     */
    boolean offer(String key, byte[] value);
}
