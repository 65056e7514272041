package io.faultline.rocketmq.report;

import java.io.Closeable;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A {@link Sink} that publishes each record to a Kafka topic with kafka-clients (value: the
 * record's bytes; key: the producer id, so one producer's records keep their order in one
 * partition), the Java side of Python's {@code KafkaReporter}.
 *
 * <p>It never waits: {@code max.block.ms} is 0 whatever the options say, so a send that would
 * block (no metadata for the topic yet, the client's buffer full while Kafka is out of reach)
 * fails at once, and {@link #offer} refuses the record: it stays in the reporter's buffer, which
 * is bounded and counts what it drops. {@code linger.ms} is 50 unless the options say otherwise.
 * A record Kafka's client took but could not deliver later (its {@code delivery.timeout.ms}
 * passed) is counted in {@link #lost()}. Nothing it does throws into the caller.
 */
public final class KafkaSink implements Sink, Closeable {
    private static final Logger log = LoggerFactory.getLogger(KafkaSink.class);

    private final Producer<String, byte[]> producer;
    private final String topic;
    private final AtomicLong sent = new AtomicLong();
    private final AtomicLong delivered = new AtomicLong();
    private final AtomicLong lost = new AtomicLong();
    private final AtomicLong refused = new AtomicLong();
    private volatile boolean warned;

    /**
     * @param bootstrapServers Kafka's {@code bootstrap.servers}
     * @param topic the topic faultline's job reads ({@code faultline.events} in docs/kafka.md)
     * @param options more producer settings (security, acks, ...), over the defaults
     */
    public KafkaSink(String bootstrapServers, String topic, Map<String, ?> options) {
        this(new KafkaProducer<String, byte[]>(config(bootstrapServers, options)), topic);
    }

    /** Over a producer made elsewhere (a {@code MockProducer} in tests); it should not block either. */
    public KafkaSink(Producer<String, byte[]> producer, String topic) {
        this.producer = producer;
        this.topic = topic;
    }

    /** The producer's settings: {@code linger.ms} 50 and the serializers, the options, then {@code max.block.ms} 0. */
    static Map<String, Object> config(String bootstrapServers, Map<String, ?> options) {
        Map<String, Object> c = new HashMap<String, Object>();
        c.put(ProducerConfig.LINGER_MS_CONFIG, 50);
        if (options != null) {
            c.putAll(options);
        }
        c.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers);
        c.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 0);
        c.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        c.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return c;
    }

    @Override
    public boolean offer(String key, byte[] value) {
        Delivery delivery = new Delivery(Thread.currentThread());
        try {
            producer.send(new ProducerRecord<String, byte[]>(topic, key, value), delivery);
        } catch (RuntimeException e) { // closed, or an error kafka-clients throws rather than reports
            refuse(e);
            return false;
        }
        delivery.returned = true;
        if (delivery.refusal != null) { // failed before it was queued (no metadata, buffer full)
            refuse(delivery.refusal);
            return false;
        }
        sent.incrementAndGet();
        return true;
    }

    private void refuse(Exception e) {
        refused.incrementAndGet();
        if (!warned) {
            warned = true;
            log.warn("faultline: Kafka refuses the reporter's records for now ({}); they wait in its buffer", e.toString());
        }
    }

    /** Records Kafka's client took. */
    public long sent() {
        return sent.get();
    }

    /** Records Kafka acknowledged. */
    public long delivered() {
        return delivered.get();
    }

    /** Records Kafka's client took and then failed to deliver: lost. */
    public long lost() {
        return lost.get();
    }

    /** Offers refused (each record is offered again until taken or dropped by the reporter). */
    public long refused() {
        return refused.get();
    }

    /** Close the producer, waiting up to {@code timeout} for what it holds to be delivered. */
    public void close(Duration timeout) {
        try {
            producer.close(timeout);
        } catch (RuntimeException e) {
            log.warn("faultline: closing the reporter's Kafka producer: {}", e.toString());
        }
    }

    /** {@link #close(Duration)} with 10 s. */
    @Override
    public void close() {
        close(Duration.ofSeconds(10));
    }

    /** One record's callback: a failure while {@code send} is still running, on its own thread,
     * is a refusal; a later one is a loss. */
    private final class Delivery implements Callback {
        private final Thread caller;
        volatile boolean returned;
        volatile Exception refusal;

        Delivery(Thread caller) {
            this.caller = caller;
        }

        @Override
        public void onCompletion(RecordMetadata metadata, Exception exception) {
            if (exception == null) {
                delivered.incrementAndGet();
            } else if (!returned && Thread.currentThread() == caller) {
                refusal = exception;
            } else {
                lost.incrementAndGet();
            }
        }
    }
}
