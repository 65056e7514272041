package io.faultline.rocketmq.report;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;

import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;

/** The Kafka sink: what it counts, and a reporter over it that survives Kafka being out of reach. */
class KafkaSinkTest {

    @Test
    void itCountsWhatKafkaTakesDeliversLosesAndRefuses() {
        MockProducer<String, byte[]> mock = new MockProducer<String, byte[]>(false, new StringSerializer(),
                new ByteArraySerializer());
        KafkaSink sink = new KafkaSink(mock, "faultline.events");
        assertThat(sink.offer("p-1", "{}".getBytes(StandardCharsets.US_ASCII))).isTrue();
        assertThat(sink.offer("p-1", "{}".getBytes(StandardCharsets.US_ASCII))).isTrue();
        assertThat(mock.history()).hasSize(2);
        assertThat(mock.history().get(0).key()).isEqualTo("p-1");
        assertThat(mock.history().get(0).topic()).isEqualTo("faultline.events");
        mock.completeNext();
        mock.errorNext(new TimeoutException("expired"));
        assertThat(sink.sent()).isEqualTo(2);
        assertThat(sink.delivered()).isEqualTo(1);
        assertThat(sink.lost()).isEqualTo(1);
        mock.sendException = new IllegalStateException("closed");
        assertThat(sink.offer("p-1", new byte[0])).isFalse();
        assertThat(sink.refused()).isEqualTo(1);
        sink.close(Duration.ZERO);
    }

    @Test
    void theConfigNeverBlocks() {
        Map<String, Object> options = new HashMap<String, Object>();
        options.put("max.block.ms", 60_000);
        options.put("linger.ms", 5);
        options.put("acks", "all");
        Map<String, Object> c = KafkaSink.config("k:9092", options);
        assertThat(c.get("max.block.ms")).isEqualTo(0);
        assertThat(c.get("linger.ms")).isEqualTo(5);
        assertThat(c.get("acks")).isEqualTo("all");
        assertThat(KafkaSink.config("k:9092", null).get("linger.ms")).isEqualTo(50);
    }

    /** Kafka out of reach (nothing listens at its address): sends go on at once, nothing throws,
     * the buffer stays within its bound and counts what it drops, and closing gives up in time. */
    @Test
    void aReporterSurvivesKafkaOutOfReach() throws IOException {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort(); // free once closed: a refused connection
        }
        Map<String, Object> options = new HashMap<String, Object>();
        options.put("reconnect.backoff.ms", 50);
        KafkaReporter reporter = new KafkaReporter("127.0.0.1:" + port, "faultline.events", options,
                Reporter.builder("p-1").windowMs(1000).buffer(100));
        long t0 = 1_795_255_200_000L;
        long began = System.nanoTime();
        for (int i = 0; i < 5_000; i++) {
            Outcome outcome = i % 10 == 0 ? Outcome.REMOTING_EXCEPTION : Outcome.SEND_OK;
            reporter.send(new SendEvent(t0 + i * 10L, "orders", "broker-" + (i % 4), 3, outcome).attempt(0));
        }
        long tookMs = (System.nanoTime() - began) / 1_000_000;
        SharedReporter.Counters c = reporter.counters();
        assertThat(c.pending).isLessThanOrEqualTo(100);
        assertThat(c.dropped).isPositive();
        assertThat(reporter.sink().sent()).isZero();
        assertThat(reporter.sink().refused()).isPositive();
        assertThat(tookMs).as("5,000 sends with Kafka away, ms").isLessThan(5_000);
        long closing = System.nanoTime();
        reporter.close(Duration.ofMillis(300));
        assertThat((System.nanoTime() - closing) / 1_000_000).as("close, ms").isLessThan(3_000);
    }
}
