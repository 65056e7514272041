package io.faultline.rocketmq.report;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.IOException;
import java.util.Map;

import org.junit.jupiter.api.Test;

/** What the vectors do not pin: the buffer's bound, keys, event ids, a sink that throws. */
class ReporterTest {
    static final long T0 = 1_795_255_200_000L; // a window boundary

    static SendEvent ok(long t, String broker, long latency) {
        return new SendEvent(t, "orders", broker, latency, Outcome.SEND_OK).attempt(0);
    }

    static SendEvent failed(long t, String broker) {
        return new SendEvent(t, "orders", broker, 3000, Outcome.REMOTING_EXCEPTION).attempt(0);
    }

    @Test
    void theBufferNeverHoldsMoreThanItsBoundAndCountsWhatItDrops() {
        RecordingSink sink = new RecordingSink();
        sink.taking = false;
        Reporter r = Reporter.builder("p-1").windowMs(1000).buffer(50).build(sink);
        for (int i = 0; i < 10_000; i++) {
            long t = T0 + i * 10L;
            if (i % 7 == 0) {
                r.send(failed(t, "broker-" + (i % 5)));
            } else {
                r.send(ok(t, "broker-" + (i % 5), 3));
            }
            assertThat(r.pending()).isLessThanOrEqualTo(50);
        }
        r.close();
        assertThat(r.pending()).isEqualTo(50);
        assertThat(r.dropped()).isGreaterThan(1_000); // 1,429 full sends and their summaries, 50 kept
        assertThat(sink.size()).isZero();

        sink.taking = true; // Kafka is back: the buffer goes, in order
        r.drain();
        assertThat(r.pending()).isZero();
        assertThat(sink.size()).isEqualTo(50);
        assertThat(r.summaries() + r.full()).isGreaterThanOrEqualTo(50);
    }

    @Test
    void aSinkThatThrowsIsOneThatRefuses() {
        final int[] calls = {0};
        Reporter r = Reporter.builder("p-1").buffer(2).build(new Sink() {
            @Override
            public boolean offer(String key, byte[] value) {
                calls[0]++;
                throw new IllegalStateException("Kafka is gone");
            }
        });
        for (int i = 0; i < 5; i++) {
            r.send(failed(T0 + i, "broker-a"));
        }
        assertThat(calls[0]).isPositive();
        assertThat(r.pending()).isEqualTo(2);
        assertThat(r.dropped()).isEqualTo(3);
    }

    @Test
    void eventIdsNumberEveryCallAndRecordsAreKeyedByProducerOrGroup() throws IOException {
        RecordingSink sink = new RecordingSink();
        Reporter r = Reporter.builder("p-7").cluster("C").build(sink);
        r.send(failed(T0, "broker-a"));
        r.send(ok(T0 + 1, "broker-b", 5).eventId("mine"));
        r.send(failed(T0 + 2, "broker-a").eventId("own-id"));
        r.consume(new ConsumeEvent(T0 + 3, "cg", "orders", "m-1", ConsumeEvent.RECONSUME_LATER));
        r.send(failed(T0 + 4, "broker-c"));
        r.close();
        assertThat(sink.record(0).get("event_id")).isEqualTo("p-7-r000000001");
        // a 4.9 failure with the switch on sends every summary first: broker-b's, its last send's id
        assertThat(sink.record(1).get("kind")).isEqualTo("send_summary");
        assertThat(sink.record(1).get("event_id")).isEqualTo("mine");
        assertThat(sink.record(2).get("event_id")).isEqualTo("own-id");
        assertThat(sink.record(3).get("event_id")).isEqualTo("p-7-r000000004"); // own ids still count
        assertThat(sink.record(4).get("event_id")).isEqualTo("p-7-r000000005");
        assertThat(sink.keys).containsExactly("p-7", "p-7", "p-7", "cg", "p-7");
        Map<String, Object> consume = sink.record(3);
        assertThat(consume.get("kind")).isEqualTo("consume_result");
        assertThat(consume).doesNotContainKey("producer_id");
    }

    @Test
    void aWindowClosesAtTheFirstCallOrFlushAtOrAfterItsEnd() throws IOException {
        RecordingSink sink = new RecordingSink();
        Reporter r = Reporter.builder("p-1").build(sink);
        r.send(ok(T0 + 100, "broker-a", 4));
        r.send(ok(T0 + 9_999, "broker-a", 6));
        r.flush(T0 + 9_999);
        assertThat(sink.size()).isZero();
        r.flush(T0 + 10_000);
        assertThat(sink.size()).isEqualTo(1);
        Map<String, Object> s = sink.record(0);
        assertThat(s.get("kind")).isEqualTo("send_summary");
        assertThat(s.get("messages")).isEqualTo(2L);
        assertThat(s.get("window_start")).isEqualTo(T0);
        assertThat(s.get("window_end")).isEqualTo(T0 + 10_000);
        assertThat(s.get("latency_total")).isEqualTo(10L);
        assertThat(s.get("first_event_id")).isEqualTo("p-1-r000000001");
        assertThat(s.get("event_id")).isEqualTo("p-1-r000000002");
        assertThat(r.openWindows()).isZero();
    }

    @Test
    void settingsAreChecked() {
        RecordingSink sink = new RecordingSink();
        assertThatThrownBy(() -> Reporter.builder("p").windowMs(0).build(sink))
                .isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> Reporter.builder("p").buffer(0).build(sink))
                .isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> Reporter.builder("p").clientProfile("rocketmq-6"))
                .isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> ok(T0, "b", 1).field("attempt", 2)).isInstanceOf(IllegalArgumentException.class);
    }
}
