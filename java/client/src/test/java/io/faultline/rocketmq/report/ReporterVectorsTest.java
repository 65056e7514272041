package io.faultline.rocketmq.report;

import io.faultline.rocketmq.Json;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.api.Test;

/**
 * The shared vectors ({@code tests/vectors/reporter}, written from the Python reporter): each
 * file's calls through the Java reporter give its records byte for byte, and its counters.
 */
class ReporterVectorsTest {
    /** {@code ${project.basedir}/../../tests/vectors/reporter} (surefire sets {@code basedir}). */
    static final Path VECTORS = Paths.get(System.getProperty("basedir", "."), "..", "..", "tests", "vectors", "reporter")
            .normalize();

    static Stream<Path> files() throws IOException {
        List<Path> files = new ArrayList<Path>();
        try (DirectoryStream<Path> dir = Files.newDirectoryStream(VECTORS, "*.json")) {
            for (Path p : dir) {
                files.add(p);
            }
        }
        files.sort(null);
        return files.stream();
    }

    @Test
    void theVectorsAreThere() throws IOException {
        assertThat(files().count()).as("vector files in %s", VECTORS.toAbsolutePath()).isGreaterThanOrEqualTo(6);
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("files")
    @SuppressWarnings("unchecked")
    void replaysToTheSameBytesAndCounters(Path file) throws IOException {
        Map<String, Object> data = Json.object(new String(Files.readAllBytes(file), StandardCharsets.UTF_8));
        Replay replay = Replay.of((Map<String, Object>) data.get("settings"));
        for (Object call : (List<Object>) data.get("calls")) {
            replay.call((Map<String, Object>) call);
        }
        List<String> expected = (List<String>) data.get("records");
        assertThat(replay.taken).hasSize(expected.size());
        for (int i = 0; i < expected.size(); i++) {
            assertThat(replay.taken.get(i)).as("record %d of %s", i, file.getFileName())
                    .isEqualTo(expected.get(i).getBytes(StandardCharsets.US_ASCII));
        }
        Map<String, Object> counters = new LinkedHashMap<String, Object>();
        counters.put("full", replay.reporter.full());
        counters.put("summarized", replay.reporter.summarized());
        counters.put("summaries", replay.reporter.summaries());
        counters.put("dropped", replay.reporter.dropped());
        assertThat(counters).isEqualTo(data.get("counters"));
    }

    /** A reporter with a vector's settings and a sink that takes (or refuses) as the calls say. */
    static final class Replay {
        final List<byte[]> taken = new ArrayList<byte[]>();
        final List<String> keys = new ArrayList<String>();
        boolean taking = true;
        Reporter reporter;

        static Replay of(Map<String, Object> settings) {
            final Replay r = new Replay();
            Reporter.Builder b = Reporter.builder((String) settings.get("producer_id"));
            Sink sink = new Sink() {
                @Override
                public boolean offer(String key, byte[] value) {
                    if (r.taking) {
                        r.taken.add(value);
                        r.keys.add(key);
                    }
                    return r.taking;
                }
            };
            for (Map.Entry<String, Object> s : settings.entrySet()) {
                Object v = s.getValue();
                switch (s.getKey()) {
                    case "producer_id":
                        break;
                    case "cluster":
                        b.cluster((String) v);
                        break;
                    case "producer_group":
                        b.producerGroup((String) v);
                        break;
                    case "client_profile":
                        b.clientProfile((String) v);
                        break;
                    case "latency_fault_enable":
                        b.latencyFaultEnable((Boolean) v);
                        break;
                    case "window_ms":
                        b.windowMs((Long) v);
                        break;
                    case "buffer":
                        b.buffer(((Long) v).intValue());
                        break;
                    default:
                        throw new IllegalArgumentException("unknown setting " + s.getKey());
                }
            }
            r.reporter = b.build(sink);
            return r;
        }

        @SuppressWarnings("unchecked")
        void call(Map<String, Object> call) {
            Map.Entry<String, Object> only = call.entrySet().iterator().next();
            Object arg = only.getValue();
            switch (only.getKey()) {
                case "send":
                    reporter.send(sendEvent((Map<String, Object>) arg));
                    break;
                case "consume":
                    reporter.consume(consumeEvent((Map<String, Object>) arg));
                    break;
                case "flush":
                    if (arg == null) {
                        reporter.flush();
                    } else {
                        reporter.flush((Long) arg);
                    }
                    break;
                case "close":
                    reporter.close();
                    break;
                case "sink":
                    taking = (Boolean) arg;
                    break;
                default:
                    throw new IllegalArgumentException("unknown call " + only.getKey());
            }
        }
    }

    /** A vector's {@code send} call as a SendEvent: every field it may have. */
    static SendEvent sendEvent(Map<String, Object> f) {
        Map<String, Object> left = new LinkedHashMap<String, Object>(f);
        SendEvent e = new SendEvent((Long) left.remove("event_time"), (String) left.remove("topic"),
                (String) left.remove("broker_name"), (Long) left.remove("latency_ms"),
                Outcome.valueOf((String) left.remove("outcome")));
        Object v;
        if ((v = left.remove("attempt")) != null) {
            e.attempt(((Long) v).intValue());
        }
        if ((v = left.remove("mode")) != null) {
            e.mode(SendMode.valueOf((String) v));
        }
        if ((v = left.remove("queue_id")) != null) {
            e.queueId(((Long) v).intValue());
        }
        if ((v = left.remove("message_id")) != null) {
            e.messageId((String) v);
        }
        if ((v = left.remove("response_code")) != null) {
            e.responseCode(((Long) v).intValue());
        }
        if ((v = left.remove("delay_level")) != null) {
            e.delayLevel(((Long) v).intValue());
        }
        if ((v = left.remove("redelivery_count")) != null) {
            e.redeliveryCount(((Long) v).intValue());
        }
        if ((v = left.remove("transaction")) != null) {
            e.transaction((String) v);
        }
        if ((v = left.remove("transaction_id")) != null) {
            e.transactionId((String) v);
        }
        if ((v = left.remove("max_attempts")) != null) {
            e.maxAttempts(((Long) v).intValue());
        }
        if ((v = left.remove("body_size")) != null) {
            e.bodySize((Long) v);
        }
        if ((v = left.remove("event_id")) != null) {
            e.eventId((String) v);
        }
        if ((v = left.remove("queue_index")) != null) {
            e.queueIndex((Long) v);
        }
        for (Map.Entry<String, Object> rest : left.entrySet()) {
            e.field(rest.getKey(), rest.getValue());
        }
        return e;
    }

    static ConsumeEvent consumeEvent(Map<String, Object> f) {
        Map<String, Object> left = new LinkedHashMap<String, Object>(f);
        ConsumeEvent e = new ConsumeEvent((Long) left.remove("event_time"), (String) left.remove("consumer_group"),
                (String) left.remove("topic"), (String) left.remove("message_id"), (String) left.remove("status"));
        Object v;
        if ((v = left.remove("broker_name")) != null) {
            e.brokerName((String) v);
        }
        if ((v = left.remove("queue_id")) != null) {
            e.queueId(((Long) v).intValue());
        }
        if ((v = left.remove("reconsume_times")) != null) {
            e.reconsumeTimes(((Long) v).intValue());
        }
        if ((v = left.remove("origin_message_id")) != null) {
            e.originMessageId((String) v);
        }
        if ((v = left.remove("delay_level")) != null) {
            e.delayLevel(((Long) v).intValue());
        }
        if ((v = left.remove("max_reconsume_times")) != null) {
            e.maxReconsumeTimes(((Long) v).intValue());
        }
        if ((v = left.remove("event_id")) != null) {
            e.eventId((String) v);
        }
        for (Map.Entry<String, Object> rest : left.entrySet()) {
            e.field(rest.getKey(), rest.getValue());
        }
        return e;
    }
}
