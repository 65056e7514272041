package io.faultline.rocketmq.harness;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.StringWriter;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import io.faultline.rocketmq.BrokerDecision;
import io.faultline.rocketmq.FaultlineFollower;
import io.faultline.rocketmq.report.FaultlineReporting;
import io.faultline.rocketmq.report.KafkaSink;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;

/**
 * The end-to-end tests' producers (tests/streaming/test_java_client.py): real RocketMQ producers
 * of the client version on the classpath, some following faultline, driven by commands.
 *
 * <pre>
 * java -cp client.jar:client-tests.jar:lib/*:&lt;a client set&gt;/* io.faultline.rocketmq.harness.Driver
 *     --namesrv 127.0.0.1:9876 --topic T --decisions faultline.decisions --cluster DefaultCluster
 * </pre>
 *
 * It reads one JSON command a line on stdin and answers each with one JSON line on stdout,
 * prefixed with {@value #ANSWER} (the clients may print too):
 *
 * <ul>
 * <li>{@code {"op":"start","id":"p","kafka":"host:port"}}: a producer {@code p} with
 *     {@code sendLatencyFaultEnable} on, following faultline from that Kafka (none without
 *     {@code kafka}); answers how long the follower's start took;
 * <li>{@code {"op":"send","id":"p","count":20,"interval_ms":10}}: that many SYNC sends, each's
 *     broker, time taken (µs), error and end (epoch ms);
 * <li>{@code {"op":"table","id":"p"}}: the producer's own fault table, read by reflection;
 * <li>{@code {"op":"view","id":"p"}}: the follower's decisions and status;
 * <li>{@code {"op":"own","id":"p","broker":"b"}}: the producer's own isolation of a broker (its
 *     {@code updateFaultItem(b, 3000, isolation=true)}, what a failed send does);
 * <li>{@code {"op":"run","id":"p","rate":10}}: {@code p} sends that many messages a second in a
 *     thread of its own until {@code halt} (the closed-loop bench; needs {@code --record});
 * <li>{@code {"op":"halt"}}: every {@code run} stops; answers each producer's sends and failures;
 * <li>{@code {"op":"clear"}}: every producer's fault table emptied (after a warm-up: a JVM's first
 *     sends are slow, and 4.x isolates a broker for 30 s after one answer of 550 ms);
 * <li>{@code {"op":"quit"}}.
 * </ul>
 *
 * <p>{@code start} also takes, for the closed-loop bench (streaming/bench/closed_loop.py):
 * {@code "latency_fault": false} (the switch off; following turns it on), {@code "shared": true}
 * (follow with the JVM's one follower of {@code kafka}, as an application with several producers
 * does, instead of a follower of its own), {@code "report": "host:port"} (report every attempt to
 * that Kafka's {@code --events} topic through faultline's {@code FaultlineReporting}, the
 * producers of the JVM sharing one Kafka producer), {@code "instance"} (the client's
 * {@code instanceName}: producers of one name share a client instance) and {@code "poll_ms"} (its
 * route poll; default 1000, RocketMQ's 30000). With {@code --record FILE} every producer's sends,
 * attempts, fault table and the follower's writes go to that file ({@link Recorder}).
 */
public class Driver {
    public static final String ANSWER = "faultline-harness ";
    private static final JsonFactory JSON = new JsonFactory();

    /** How a producer of the harness sends one message; returns the broker that took it. */
    public interface Sender {
        String send(byte[] body) throws Exception;
    }

    private static final class Producer {
        final DefaultMQProducer producer;
        final Sender sender;
        final FaultlineFollower follower;

        Producer(DefaultMQProducer producer, Sender sender, FaultlineFollower follower) {
            this.producer = producer;
            this.sender = sender;
            this.follower = follower;
        }
    }

    private final Map<String, String> options;
    private final Map<String, Producer> producers = new LinkedHashMap<>();
    private final PrintStream out;
    private final Recorder recorder;
    private final List<FaultlineReporting> reportings = new ArrayList<>();
    private FaultlineFollower shared;
    private KafkaSink sink;

    public Driver(Map<String, String> options) throws IOException {
        this.options = options;
        this.out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true);
        this.recorder = options.containsKey("record") ? new Recorder(options.get("record")) : null;
    }

    public static void main(String[] args) throws Exception {
        Driver d = new Driver(options(args));
        d.serve(true);
        System.exit(0);  // the clients' own threads are not all daemons in every version
    }

    /** Add a producer made elsewhere (the Spring Boot application's), with the follower it has. */
    public void add(String id, DefaultMQProducer producer, Sender sender, FaultlineFollower follower) {
        producers.put(id, new Producer(producer, sender, follower));
    }

    /** Answer commands until {@code quit}; then close the producers (and followers) it made itself. */
    public void serve(boolean close) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Map<String, Object> ready = new LinkedHashMap<>();
        ready.put("ready", true);
        answer(ready);
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (line.trim().isEmpty()) {
                continue;
            }
            Map<String, Object> command = object(line);
            Object op = command.get("op");
            if ("quit".equals(op)) {
                break;
            }
            try {
                answer(run(String.valueOf(op), command));
            } catch (Throwable e) {
                Map<String, Object> error = new LinkedHashMap<>();
                error.put("error", e.toString());
                answer(error);
            }
        }
        if (recorder != null) {
            try {
                recorder.halt();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        for (FaultlineReporting r : reportings) {
            r.close();  // every open summary goes out
        }
        if (sink != null) {
            sink.close();
        }
        for (Producer p : producers.values()) {
            if (!close) {
                break;
            }
            if (p.follower != null && p.follower != shared) {
                p.follower.close();
            }
            p.producer.shutdown();
        }
        if (shared != null) {
            shared.close();
        }
        if (recorder != null) {
            recorder.close();
        }
    }

    private Map<String, Object> run(String op, Map<String, Object> c) throws Exception {
        String id = String.valueOf(c.get("id"));
        Map<String, Object> a = new LinkedHashMap<>();
        switch (op) {
            case "start": {
                DefaultMQProducer producer = new DefaultMQProducer("faultline-harness-" + id);
                producer.setNamesrvAddr(options.get("namesrv"));
                producer.setInstanceName(c.get("instance") == null ? id : String.valueOf(c.get("instance")));
                producer.setSendLatencyFaultEnable(!Boolean.FALSE.equals(c.get("latency_fault")));
                producer.setPollNameServerInterval(c.get("poll_ms") == null ? 1000 : ((Number) c.get("poll_ms")).intValue());
                producer.setSendMsgTimeout(3000);
                producer.setRetryTimesWhenSendFailed(2);
                FaultlineFollower follower = null;
                Object kafka = c.get("kafka");
                if (kafka != null) {
                    long begin = System.nanoTime();
                    if (Boolean.TRUE.equals(c.get("shared"))) {
                        if (shared == null) {
                            shared = follower(String.valueOf(kafka));
                        }
                        follower = shared;
                    } else {
                        follower = follower(String.valueOf(kafka));
                    }
                    producer.setSendLatencyFaultEnable(true);  // what following needs (the Spring Boot auto-configuration's default)
                    follower.follow(producer);
                    a.put("follower_start_us", (System.nanoTime() - begin) / 1000);
                }
                if (recorder != null) {
                    recorder.watch(id, producer);
                }
                Object report = c.get("report");
                if (report != null) {
                    if (sink == null) {
                        sink = new KafkaSink(String.valueOf(report), options.get("events"), new HashMap<String, Object>());
                    }
                    reportings.add(FaultlineReporting.install(producer,
                        new FaultlineReporting.Settings().cluster(options.get("cluster")).producerId(id), sink));
                }
                producer.start();
                String topic = options.get("topic");
                add(id, producer, body -> producer.send(new Message(topic, body)).getMessageQueue().getBrokerName(), follower);
                return a;
            }
            case "send": {
                Producer p = producers.get(id);
                long count = ((Number) c.get("count")).longValue();
                long interval = c.get("interval_ms") == null ? 0 : ((Number) c.get("interval_ms")).longValue();
                List<Object> brokers = new ArrayList<>();
                List<Object> micros = new ArrayList<>();
                List<Object> errors = new ArrayList<>();
                List<Object> at = new ArrayList<>();
                for (long n = 0; n < count; n++) {
                    byte[] body = ("faultline harness " + id + " " + n).getBytes(StandardCharsets.UTF_8);
                    long begin = System.nanoTime();
                    String broker = null;
                    String error = null;
                    try {
                        broker = p.sender.send(body);
                    } catch (Throwable e) {
                        error = e.toString();
                    }
                    micros.add((System.nanoTime() - begin) / 1000);
                    at.add(System.currentTimeMillis());
                    brokers.add(broker);
                    errors.add(error);
                    if (interval > 0) {
                        Thread.sleep(interval);
                    }
                }
                a.put("brokers", brokers);
                a.put("latency_us", micros);
                a.put("errors", errors);
                a.put("at_ms", at);
                return a;
            }
            case "run": {
                Producer p = producers.get(id);
                if (recorder == null) {
                    throw new IllegalStateException("run needs --record");
                }
                recorder.run(id, p.sender, ((Number) c.get("rate")).doubleValue());
                return a;
            }
            case "halt": {
                a.put("producers", recorder == null ? new LinkedHashMap<String, Object>() : recorder.halt());
                return a;
            }
            case "clear": {
                for (Producer p : producers.values()) {
                    items(p.producer).clear();
                }
                return a;
            }
            case "table": {
                Producer p = producers.get(id);
                a.put("now", System.currentTimeMillis());
                a.put("latency_fault", p.producer.isSendLatencyFaultEnable());
                a.put("items", table(p.producer));
                return a;
            }
            case "view": {
                Producer p = producers.get(id);
                Map<String, Object> decisions = new TreeMap<>();
                for (BrokerDecision d : p.follower.decisions().values()) {
                    Map<String, Object> row = new LinkedHashMap<>();
                    row.put("decision", d.decision());
                    row.put("state", d.state().name());
                    row.put("held_until", d.heldUntil());
                    row.put("seen_at", d.seenAt());
                    row.put("live", d.live());
                    row.put("available", p.follower.isAvailable(d.broker()));
                    decisions.put(d.broker(), row);
                }
                FaultlineFollower.Status s = p.follower.status();
                a.put("decisions", decisions);
                a.put("caught_up", s.caughtUp);
                a.put("messages", s.messagesRead);
                a.put("holds_written", s.holdsWritten);
                a.put("last_error", s.lastError);
                return a;
            }
            case "own": {
                Producer p = producers.get(id);
                Object impl = p.producer.getDefaultMQProducerImpl();
                String broker = String.valueOf(c.get("broker"));
                Method four = find(impl.getClass(), "updateFaultItem", 4);
                if (four != null) {
                    four.invoke(impl, broker, 3000L, true, true);
                } else {
                    find(impl.getClass(), "updateFaultItem", 3).invoke(impl, broker, 3000L, true);
                }
                a.put("items", table(p.producer));
                return a;
            }
            default:
                Map<String, Object> more = extra(op, a);
                if (more == null) {
                    throw new IllegalArgumentException("unknown op " + op);
                }
                return more;
        }
    }

    private FaultlineFollower follower(String kafka) {
        FaultlineFollower.Builder b = FaultlineFollower.builder(kafka)
            .topic(options.get("decisions"))
            .cluster(options.get("cluster"))
            .retryMs(500);
        if (recorder != null) {
            b.listener(recorder);
        }
        return b.build().start();
    }

    /** Another command's answer, or null when there is no such command. */
    protected Map<String, Object> extra(String op, Map<String, Object> answer) {
        return null;
    }

    /** The producer's own fault table: {@code mqFaultStrategy.latencyFaultTolerance.faultItemTable}. */
    static Map<String, Object> table(DefaultMQProducer producer) throws ReflectiveOperationException {
        Map<String, Object> out = new TreeMap<>();
        for (Map.Entry<?, ?> e : items(producer).entrySet()) {
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("latency", field(e.getValue(), "currentLatency"));
            row.put("available_from", field(e.getValue(), "startTimestamp"));
            out.put(String.valueOf(e.getKey()), row);
        }
        return out;
    }

    private static Map<?, ?> items(DefaultMQProducer producer) throws ReflectiveOperationException {
        Object strategy = field(producer.getDefaultMQProducerImpl(), "mqFaultStrategy");
        Object tolerance = field(strategy, "latencyFaultTolerance");
        return (Map<?, ?>) field(tolerance, "faultItemTable");
    }

    private static Method find(Class<?> type, String name, int params) {
        for (Method m : type.getMethods()) {
            if (m.getName().equals(name) && m.getParameterCount() == params) {
                return m;
            }
        }
        return null;
    }

    private static Object field(Object target, String name) throws ReflectiveOperationException {
        for (Class<?> c = target.getClass(); c != null; c = c.getSuperclass()) {
            try {
                Field f = c.getDeclaredField(name);
                f.setAccessible(true);
                return f.get(target);
            } catch (NoSuchFieldException e) {
                // the superclass
            }
        }
        throw new NoSuchFieldException(name);
    }

    private synchronized void answer(Map<String, Object> answer) throws IOException {
        StringWriter w = new StringWriter();
        try (JsonGenerator g = JSON.createGenerator(w)) {
            write(g, answer);
        }
        out.println(ANSWER + w);
        out.flush();
    }

    @SuppressWarnings("unchecked")
    static void write(JsonGenerator g, Object v) throws IOException {
        if (v == null) {
            g.writeNull();
        } else if (v instanceof Map) {
            g.writeStartObject();
            for (Map.Entry<String, Object> e : ((Map<String, Object>) v).entrySet()) {
                g.writeFieldName(e.getKey());
                write(g, e.getValue());
            }
            g.writeEndObject();
        } else if (v instanceof List) {
            g.writeStartArray();
            for (Object x : (List<Object>) v) {
                write(g, x);
            }
            g.writeEndArray();
        } else if (v instanceof Boolean) {
            g.writeBoolean((Boolean) v);
        } else if (v instanceof Long || v instanceof Integer) {
            g.writeNumber(((Number) v).longValue());
        } else if (v instanceof Number) {
            g.writeNumber(((Number) v).doubleValue());
        } else {
            g.writeString(String.valueOf(v));
        }
    }

    private static Map<String, Object> object(String line) throws IOException {
        Map<String, Object> m = new HashMap<>();
        try (JsonParser p = JSON.createParser(line)) {
            if (p.nextToken() != JsonToken.START_OBJECT) {
                throw new IOException("not a JSON object: " + line);
            }
            while (p.nextToken() == JsonToken.FIELD_NAME) {
                String name = p.getCurrentName();
                JsonToken t = p.nextToken();
                if (t == JsonToken.VALUE_NUMBER_INT) {
                    m.put(name, p.getLongValue());
                } else if (t == JsonToken.VALUE_NUMBER_FLOAT) {
                    m.put(name, p.getDoubleValue());
                } else if (t == JsonToken.VALUE_TRUE || t == JsonToken.VALUE_FALSE) {
                    m.put(name, t == JsonToken.VALUE_TRUE);
                } else if (t == JsonToken.VALUE_NULL) {
                    m.put(name, null);
                } else {
                    m.put(name, p.getText());
                }
            }
        }
        return m;
    }

    static Map<String, String> options(String[] args) {
        Map<String, String> o = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (args[i].startsWith("--")) {
                o.put(args[i].substring(2), args[i + 1]);
            }
        }
        return o;
    }
}
