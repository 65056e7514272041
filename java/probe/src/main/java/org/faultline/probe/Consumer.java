package org.faultline.probe;

import java.io.File;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * A push consumer that asks for retries, recorded as faultline's {@code consume_result} events.
 *
 * <pre>
 * java -cp probe.jar:&lt;a client set&gt;/* org.faultline.probe.Consumer --namesrv 127.0.0.1:9876
 *     --topic T --group G --out DIR [--max-reconsume 2] [--duration-ms 30000] [--cluster C]
 * </pre>
 *
 * A message whose number (the end of its key) is a multiple of 5 is never consumed (it goes to
 * the group's DLQ after {@code --max-reconsume} retries), one that leaves 1 is consumed at its
 * first retry, every other one at once. Each delivery is a line of {@code DIR/events.jsonl}; at the
 * end, every message of {@code SCHEDULE_TOPIC_XXXX} and of the group's {@code %RETRY%} and
 * {@code %DLQ%} topics (the broker's own) is a line of {@code DIR/schedule.jsonl},
 * {@code DIR/retry.jsonl} and {@code DIR/dlq.jsonl}.
 */
public final class Consumer {

    static boolean consumed(String key, int reconsumeTimes) {
        if (key == null) {
            return true;  // not the probe's (its warm-up)
        }
        int n = Integer.parseInt(key.substring(key.lastIndexOf('-') + 1));
        return n % 5 != 0 && (n % 5 != 1 || reconsumeTimes > 0);
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> o = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            o.put(args[i].substring(2), args[i + 1]);
        }
        String group = o.get("group");
        String topic = o.get("topic");
        int maxReconsume = Integer.parseInt(o.getOrDefault("max-reconsume", "2"));
        File dir = new File(o.get("out"));
        if (!dir.isDirectory() && !dir.mkdirs()) {
            throw new IllegalStateException("cannot create " + dir);
        }
        AtomicLong seq = new AtomicLong();
        try (Lines events = new Lines(new File(dir, "events.jsonl"));
             Lines retry = new Lines(new File(dir, "retry.jsonl"));
             Lines schedule = new Lines(new File(dir, "schedule.jsonl"));
             Lines dlq = new Lines(new File(dir, "dlq.jsonl"))) {
            DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
            consumer.setNamesrvAddr(o.get("namesrv"));
            consumer.setInstanceName(group);
            consumer.setMaxReconsumeTimes(maxReconsume);
            consumer.setPollNameServerInterval(1000);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
                ConsumeConcurrentlyStatus status = ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                for (MessageExt msg : msgs) {
                    boolean ok = consumed(msg.getKeys(), msg.getReconsumeTimes());
                    Map<String, Object> e = new LinkedHashMap<>();
                    e.put("cluster", o.getOrDefault("cluster", "DefaultCluster"));
                    e.put("kind", "consume_result");
                    e.put("event_id", String.format("%s-%07d", group, seq.getAndIncrement()));
                    e.put("event_time", System.currentTimeMillis());
                    e.put("consumer_group", group);
                    e.put("topic", msg.getTopic());
                    e.put("message_id", msg.getMsgId());
                    String origin = msg.getProperty("ORIGIN_MESSAGE_ID");
                    e.put("origin_message_id", origin != null ? origin : msg.getMsgId());
                    e.put("key", msg.getKeys());
                    e.put("broker_name", msg.getBrokerName());
                    e.put("queue_id", msg.getQueueId());
                    e.put("reconsume_times", msg.getReconsumeTimes());
                    e.put("status", ok ? "CONSUME_SUCCESS" : "RECONSUME_LATER");
                    e.put("delay_level", context.getDelayLevelWhenNextConsume());
                    e.put("max_reconsume_times", maxReconsume);
                    events.write(e);
                    if (!ok) {
                        status = ConsumeConcurrentlyStatus.RECONSUME_LATER;
                    }
                }
                return status;
            });
            consumer.start();
            System.out.println("faultline probe consumer started");
            Thread.sleep(Long.parseLong(o.getOrDefault("duration-ms", "30000")));
            consumer.shutdown();
            read(o.get("namesrv"), group, "SCHEDULE_TOPIC_XXXX", schedule);
            read(o.get("namesrv"), group, "%RETRY%" + group, retry);
            read(o.get("namesrv"), group, "%DLQ%" + group, dlq);
        }
        System.exit(0);
    }

    /** Every message of a topic the broker keeps for the group ({@code SCHEDULE_TOPIC_XXXX},
     * whose queue is the delay level less one; {@code %RETRY%}: each retry as the broker's delay
     * service delivered it; {@code %DLQ%}), wherever a broker holds one. */
    private static void read(String namesrv, String group, String topic, Lines out) throws Exception {
        DefaultMQPullConsumer puller = new DefaultMQPullConsumer(group + "-reader");
        puller.setNamesrvAddr(namesrv);
        puller.setInstanceName(group + "-reader");
        puller.start();
        try {
            List<MessageQueue> queues;
            try {
                queues = new ArrayList<>(puller.fetchSubscribeMessageQueues(topic));
            } catch (Exception e) {
                return;  // no message went there: the topic was never made
            }
            for (MessageQueue mq : queues) {
                long offset = 0;
                while (true) {
                    PullResult pulled = puller.pull(mq, "*", offset, 32);
                    if (pulled.getPullStatus() != PullStatus.FOUND) {
                        break;
                    }
                    for (MessageExt msg : pulled.getMsgFoundList()) {
                        Map<String, Object> d = new LinkedHashMap<>();
                        d.put("key", msg.getKeys());
                        d.put("broker_name", mq.getBrokerName());
                        d.put("store_time", msg.getStoreTimestamp());
                        d.put("reconsume_times", msg.getReconsumeTimes());
                        d.put("message_id", msg.getMsgId());
                        d.put("queue_id", mq.getQueueId());
                        d.put("real_topic", msg.getProperty("REAL_TOPIC"));
                        out.write(d);
                    }
                    offset = pulled.getNextBeginOffset();
                }
            }
        } finally {
            puller.shutdown();
        }
    }

    private Consumer() {
    }
}
