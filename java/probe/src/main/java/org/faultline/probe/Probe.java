package org.faultline.probe;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.message.Message;

/**
 * One real RocketMQ producer that sends at a steady rate for a while and records what it did.
 *
 * <pre>
 * java -cp probe.jar:&lt;a client set&gt;/* org.faultline.probe.Probe --namesrv 127.0.0.1:9876
 *     --topic T --id p-1 --profile rocketmq-4.9 --out DIR [--mode SYNC|ASYNC]
 *     [--latency-fault true|false] [--rate 20] [--duration-ms 10000] [--timeout-ms 3000]
 *     [--retries 2] [--poll-ms 1000] [--cluster C] [--group G] [--warmup 10]
 *     [--transactions true [--linger-ms 20000]]
 * </pre>
 *
 * Into DIR it writes {@code events.jsonl} (faultline's input events: a send_result per attempt the
 * hook saw),
 * {@code tables.jsonl} (the client's own fault table and its list of the topic's queues, read
 * before every send and once at the end)
 * and {@code sends.jsonl} (each message's fate as the application saw it). It exits 0 when the
 * time is up and every send has ended. With {@code --transactions} it sends half messages
 * ({@code sendMessageInTransaction}, SYNC) and records their ends and checks ({@link
 * Transactions}), staying {@code --linger-ms} after its last send to answer the broker's checks.
 */
public final class Probe {

    public static void main(String[] args) throws Exception {
        Map<String, String> o = options(args);
        String id = o.get("id");
        String topic = o.get("topic");
        String mode = o.getOrDefault("mode", "SYNC");
        boolean latencyFault = Boolean.parseBoolean(o.getOrDefault("latency-fault", "true"));
        int retries = Integer.parseInt(o.getOrDefault("retries", "2"));
        int timeout = Integer.parseInt(o.getOrDefault("timeout-ms", "3000"));
        double rate = Double.parseDouble(o.getOrDefault("rate", "20"));
        long duration = Long.parseLong(o.getOrDefault("duration-ms", "10000"));
        int pollMs = Integer.parseInt(o.getOrDefault("poll-ms", "1000"));
        boolean async = "ASYNC".equals(mode);

        Map<String, Object> base = new LinkedHashMap<>();
        base.put("cluster", o.getOrDefault("cluster", "DefaultCluster"));
        base.put("producer_id", id);
        base.put("producer_group", o.getOrDefault("group", "faultline-probe"));
        base.put("client_profile", o.get("profile"));
        base.put("latency_fault_enable", latencyFault);
        base.put("topic", topic);
        base.put("mode", mode);
        base.put("max_attempts", 1 + retries);

        File dir = new File(o.get("out"));
        if (!dir.isDirectory() && !dir.mkdirs()) {
            throw new IllegalStateException("cannot create " + dir);
        }
        try (Lines events = new Lines(new File(dir, "events.jsonl"));
             Lines tables = new Lines(new File(dir, "tables.jsonl"));
             Lines sends = new Lines(new File(dir, "sends.jsonl"))) {
            boolean transactional = Boolean.parseBoolean(o.getOrDefault("transactions", "false"));
            DefaultMQProducer producer;
            if (transactional) {
                TransactionMQProducer tx = new TransactionMQProducer((String) base.get("producer_group"));
                tx.setTransactionListener(new Transactions(events, base));
                producer = tx;
            } else {
                producer = new DefaultMQProducer((String) base.get("producer_group"));
            }
            producer.setNamesrvAddr(o.get("namesrv"));
            producer.setInstanceName(id);
            producer.setSendLatencyFaultEnable(latencyFault);
            producer.setPollNameServerInterval(pollMs);
            // the producer's group reaches a broker with its heartbeat (30 s by default): a
            // transactional producer gets no check before (the broker counts it all the same)
            producer.setHeartbeatBrokerInterval(1000);
            producer.setSendMsgTimeout(timeout);
            producer.setRetryTimesWhenSendFailed(retries);
            producer.setRetryTimesWhenSendAsyncFailed(retries);
            Recorder recorder = new Recorder(events, base);
            producer.getDefaultMQProducerImpl().registerSendMessageHook(recorder);
            producer.start();
            FaultTable table = new FaultTable(producer, topic);
            // The JVM's first sends load classes between the client's clock and the hook's: they
            // are sent unrecorded, and what they left in the fault table is forgotten
            int warmup = Integer.parseInt(o.getOrDefault("warmup", "10"));
            for (int n = 0; n < warmup; n++) {
                Message msg = new Message(topic, "faultline probe warm-up".getBytes(StandardCharsets.UTF_8));
                try {
                    producer.send(msg);
                } catch (Exception e) {
                    System.err.println("faultline probe: warm-up send failed: " + e);
                }
            }
            table.clear();
            // ASYNC sends in flight are bounded, as an application's would be
            Semaphore inFlight = new Semaphore(64);
            long start = System.currentTimeMillis();
            long period = Math.max(1, Math.round(1000 / rate));
            for (int n = 0; ; n++) {
                long due = start + n * period;
                long now = System.currentTimeMillis();
                if (due >= start + duration) {
                    break;
                }
                if (due > now) {
                    Thread.sleep(due - now);
                }
                tables.write(table.snapshot(id));
                String messageId = String.format("%s-%06d", id, n);
                Message msg = new Message(topic, ("faultline probe " + messageId).getBytes(StandardCharsets.UTF_8));
                msg.setKeys(messageId);
                Recorder.Sending sending = recorder.begin(msg, messageId);
                if (async) {
                    inFlight.acquire();
                    producer.send(msg, new SendCallback() {
                        @Override
                        public void onSuccess(SendResult result) {
                            sends.write(Recorder.fate(sending, result, null));
                            inFlight.release();
                        }

                        @Override
                        public void onException(Throwable e) {
                            sends.write(Recorder.fate(sending, null, e));
                            inFlight.release();
                        }
                    });
                } else {
                    SendResult result = null;
                    Throwable error = null;
                    try {
                        result = transactional
                            ? ((TransactionMQProducer) producer).sendMessageInTransaction(msg, sending)
                            : producer.send(msg);
                    } catch (Exception e) {
                        error = e;
                    }
                    recorder.end(sending, error);
                    sends.write(Recorder.fate(sending, result, error));
                }
            }
            if (!inFlight.tryAcquire(64, timeout + 2000L, TimeUnit.MILLISECONDS)) {
                System.err.println("faultline probe: ASYNC sends still in flight at the end");
            }
            tables.write(table.snapshot(id));
            // a transactional producer stays to answer the broker's checks of what it sent
            Thread.sleep(Long.parseLong(o.getOrDefault("linger-ms", "0")));
            producer.shutdown();
        }
        System.exit(0);  // the client's own threads are not all daemons in every version
    }

    private static Map<String, String> options(String[] args) {
        Map<String, String> o = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --name value, got " + args[i]);
            }
            o.put(args[i].substring(2), args[i + 1]);
        }
        for (String required : new String[] {"namesrv", "topic", "id", "profile", "out"}) {
            if (!o.containsKey(required)) {
                throw new IllegalArgumentException("--" + required + " is required");
            }
        }
        return o;
    }

    private Probe() {
    }
}
