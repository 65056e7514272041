package io.faultline.rocketmq.report;

import io.faultline.rocketmq.Json;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * A check against a real Kafka broker (not a test; a harness runs it and reads the topic back).
 *
 * <pre>
 * java -cp CLASSPATH io.faultline.rocketmq.report.KafkaCheck vector BOOTSTRAP TOPIC FILE
 *     replays a vector file (without sink calls) through a KafkaReporter and closes it: a
 *     SharedReporter of its own before the first record is made, since a reporter whose sink
 *     refuses is not made to refuse on demand here
 * java -cp CLASSPATH io.faultline.rocketmq.report.KafkaCheck steady BOOTSTRAP TOPIC SECONDS BUFFER
 *     sends 1,000 attempts a second over 4 brokers (every 50th fails) for SECONDS, flushing every
 *     second as the timer does, printing the counters each second, then closes (20 s)
 * </pre>
 * Prints the counters as {@code counters full=.. summarized=.. summaries=.. dropped=.. pending=..
 * sent=.. delivered=.. lost=.. refused=..}.
 */
public final class KafkaCheck {
    @SuppressWarnings("unchecked")
    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String bootstrap = args[1];
        String topic = args[2];
        Map<String, Object> options = new HashMap<String, Object>();
        options.put("reconnect.backoff.max.ms", 200);
        if (mode.equals("vector")) {
            Map<String, Object> data = Json.object(new String(Files.readAllBytes(Paths.get(args[3])),
                    StandardCharsets.UTF_8));
            Map<String, Object> settings = (Map<String, Object>) data.get("settings");
            Reporter.Builder b = Reporter.builder((String) settings.get("producer_id"));
            if (settings.containsKey("cluster")) {
                b.cluster((String) settings.get("cluster"));
            }
            if (settings.containsKey("producer_group")) {
                b.producerGroup((String) settings.get("producer_group"));
            }
            if (settings.containsKey("client_profile")) {
                b.clientProfile((String) settings.get("client_profile"));
            }
            if (settings.containsKey("latency_fault_enable")) {
                b.latencyFaultEnable((Boolean) settings.get("latency_fault_enable"));
            }
            if (settings.containsKey("window_ms")) {
                b.windowMs((Long) settings.get("window_ms"));
            }
            KafkaReporter reporter = new KafkaReporter(bootstrap, topic, options, b);
            for (Object c : (List<Object>) data.get("calls")) {
                Map.Entry<String, Object> call = ((Map<String, Object>) c).entrySet().iterator().next();
                Object arg = call.getValue();
                switch (call.getKey()) {
                    case "send":
                        reporter.send(ReporterVectorsTest.sendEvent((Map<String, Object>) arg));
                        break;
                    case "consume":
                        reporter.consume(ReporterVectorsTest.consumeEvent((Map<String, Object>) arg));
                        break;
                    case "flush":
                        if (arg == null) {
                            reporter.flushAll();
                        } else {
                            reporter.flush((Long) arg);
                        }
                        break;
                    case "close":
                        break;
                    default:
                        throw new IllegalArgumentException("not replayed here: " + call.getKey());
                }
            }
            reporter.close(Duration.ofSeconds(20));
            print(reporter);
            return;
        }
        int seconds = Integer.parseInt(args[3]);
        int buffer = Integer.parseInt(args[4]);
        KafkaReporter reporter = new KafkaReporter(bootstrap, topic, options,
                Reporter.builder("p-steady").cluster("C").clientProfile("rocketmq-5").buffer(buffer));
        long n = 0;
        long end = System.currentTimeMillis() + seconds * 1000L;
        long nextPrint = System.currentTimeMillis() + 1000;
        while (System.currentTimeMillis() < end) {
            for (int i = 0; i < 10; i++, n++) {
                Outcome outcome = n % 50 == 0 ? Outcome.REMOTING_EXCEPTION : Outcome.SEND_OK;
                reporter.send(new SendEvent(System.currentTimeMillis(), "orders", "broker-" + (n % 4), 3, outcome)
                        .attempt(0).messageId("m-" + n));
            }
            Thread.sleep(10);
            if (System.currentTimeMillis() >= nextPrint) {
                reporter.flush();
                print(reporter);
                nextPrint += 1000;
            }
        }
        reporter.close(Duration.ofSeconds(20));
        print(reporter);
    }

    private static void print(KafkaReporter r) {
        KafkaSink s = r.sink();
        System.out.println("counters " + r.counters() + " sent=" + s.sent() + " delivered=" + s.delivered()
                + " lost=" + s.lost() + " refused=" + s.refused());
        System.out.flush();
    }

    private KafkaCheck() {
    }
}
