package org.faultline.probe;

import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.rocketmq.client.impl.producer.DefaultMQProducerImpl;
import org.apache.rocketmq.client.impl.producer.TopicPublishInfo;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The client's own fault table, read by reflection: {@code DefaultMQProducerImpl.mqFaultStrategy
 * .latencyFaultTolerance.faultItemTable}, a map of broker name to {@code FaultItem} with
 * {@code currentLatency}, {@code startTimestamp} (the time the broker is available again) and,
 * from 5.x, {@code reachableFlag}. The same field names in 4.7.1, 4.9.7 and 5.3.x; no version
 * offers them through its API.
 *
 * <p>Beside it, the producer's own list of the topic's queues ({@code TopicPublishInfo}), which
 * RocketMQ 4.x rewrites in place when it picks a queue of a broker it isolated (a queue swap).
 */
final class FaultTable {
    private final Map<?, ?> items;
    private final DefaultMQProducerImpl impl;
    private final String topic;

    FaultTable(DefaultMQProducer producer, String topic) throws ReflectiveOperationException {
        this.impl = producer.getDefaultMQProducerImpl();
        this.topic = topic;
        Object strategy = field(impl, "mqFaultStrategy");
        Object tolerance = field(strategy, "latencyFaultTolerance");
        this.items = (Map<?, ?>) field(tolerance, "faultItemTable");
    }

    /** Forget every item (after the warm-up, which no one recorded). */
    void clear() {
        items.clear();
    }

    Map<String, Object> snapshot(String producerId) {
        Map<String, Object> s = new LinkedHashMap<>();
        s.put("producer_id", producerId);
        s.put("at", System.currentTimeMillis());
        List<Map<String, Object>> rows = new ArrayList<>();
        for (Object item : new TreeMap<>(items).values()) {
            Map<String, Object> row = new LinkedHashMap<>();
            try {
                row.put("broker_name", field(item, "name"));
                row.put("latency_ms", field(item, "currentLatency"));
                row.put("available_from", field(item, "startTimestamp"));
                Object reachable = optionalField(item, "reachableFlag");
                if (reachable != null) {
                    row.put("reachable", reachable);
                }
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("the client's FaultItem changed shape", e);
            }
            rows.add(row);
        }
        s.put("items", rows);
        TopicPublishInfo info = impl.getTopicPublishInfoTable().get(topic);
        if (info != null) {
            List<String> queues = new ArrayList<>();
            for (MessageQueue mq : new ArrayList<>(info.getMessageQueueList())) {
                queues.add(mq.getBrokerName() + ":" + mq.getQueueId());
            }
            s.put("queues", queues);
        }
        return s;
    }

    private static Object optionalField(Object target, String name) throws IllegalAccessException {
        try {
            return field(target, name);
        } catch (NoSuchFieldException e) {
            return null;
        }
    }

    static Object field(Object target, String name) throws NoSuchFieldException, IllegalAccessException {
        for (Class<?> c = target.getClass(); c != null; c = c.getSuperclass()) {
            try {
                Field f = c.getDeclaredField(name);
                f.setAccessible(true);
                return f.get(target);
            } catch (NoSuchFieldException e) {
                // look in the superclass
            }
        }
        throw new NoSuchFieldException(target.getClass().getName() + "." + name);
    }
}
