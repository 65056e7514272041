package io.faultline.rocketmq.report;

import java.io.Closeable;
import java.time.Duration;
import java.util.Map;

/**
 * A {@link Reporter} that publishes to the send-results topic through a {@link KafkaSink}, safe
 * to call from many threads: Python's {@code KafkaReporter} for a Java producer that reports its
 * sends itself (the RocketMQ hooks of {@link FaultlineReporting} do it for it). It never waits:
 * a record Kafka's client cannot queue stays in the reporter's buffer.
 *
 * <pre>{@code
 * KafkaReporter reporter = new KafkaReporter("localhost:9092", "faultline.events", null,
 *         Reporter.builder(clientId).cluster("DefaultCluster").clientProfile("rocketmq-4.9"));
 * reporter.send(new SendEvent(now, topic, broker, elapsed, Outcome.SEND_OK).attempt(0));  // each attempt
 * reporter.flush();                      // from a timer: windows close without new sends
 * reporter.close(Duration.ofSeconds(10)); // at shutdown
 * }</pre>
 */
public final class KafkaReporter implements Closeable {
    private final KafkaSink sink;
    private final SharedReporter reporter;

    public KafkaReporter(String bootstrapServers, String topic, Map<String, ?> options, Reporter.Builder settings) {
        this.sink = new KafkaSink(bootstrapServers, topic, options);
        this.reporter = new SharedReporter(settings.build(sink), SystemClock.INSTANCE);
    }

    /** One send attempt's result. */
    public void send(SendEvent event) {
        reporter.send(event);
    }

    /** One consume's result. */
    public void consume(ConsumeEvent event) {
        reporter.consume(event);
    }

    /** The summaries whose window ended by now go out. */
    public void flush() {
        reporter.flush();
    }

    /** The summaries whose window ended by {@code now} (epoch ms of event time) go out. */
    public void flush(long now) {
        reporter.flush(now);
    }

    /** Every open summary goes out (Python's {@code flush()} without a time). */
    public void flushAll() {
        reporter.flushAll();
    }

    /** The reporter's counters. */
    public SharedReporter.Counters counters() {
        return reporter.counters();
    }

    public KafkaSink sink() {
        return sink;
    }

    /** Send every open summary and wait up to {@code timeout} for Kafka to take it. */
    public void close(Duration timeout) {
        closeAndWait(reporter, sink, timeout);
    }

    @Override
    public void close() {
        close(Duration.ofSeconds(10));
    }

    /** Close the reporter, offer its buffer to Kafka until it is empty or {@code timeout} passes, and
     * close the Kafka producer with what is left of it. */
    static void closeAndWait(SharedReporter reporter, KafkaSink sink, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        reporter.close();
        while (reporter.drain() > 0 && System.nanoTime() < deadline) {
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
        }
        sink.close(Duration.ofNanos(Math.max(0, deadline - System.nanoTime())));
    }
}
