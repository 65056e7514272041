package org.faultline.probe;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

import org.apache.rocketmq.client.producer.DefaultMQProducer;

/**
 * Asks the NameServer for the topic's route every {@code periodMs} and writes a faultline
 * {@code route} event whenever it changed: each broker with a master address and its write queues
 * and permission, as {@code topicRouteData2TopicPublishInfo} hands them to a producer. A failed
 * lookup writes nothing: the producers keep the route they had.
 *
 * <p>The route's classes moved from {@code org.apache.rocketmq.common.protocol.route} (4.x) to
 * {@code org.apache.rocketmq.remoting.protocol.route} (5.x) with the same getters, so they are read
 * by name.
 */
final class RouteWatcher extends Thread {
    private final DefaultMQProducer producer;
    private final String topic;
    private final Lines events;
    private final Object cluster;
    private final String id;
    private final long periodMs;

    RouteWatcher(DefaultMQProducer producer, String topic, Lines events, Object cluster, String id, long periodMs) {
        super("faultline-route-watcher");
        setDaemon(true);
        this.producer = producer;
        this.topic = topic;
        this.events = events;
        this.cluster = cluster;
        this.id = id;
        this.periodMs = Math.max(100, periodMs);
    }

    @Override
    public void run() {
        List<Map<String, Object>> previous = null;
        int n = 0;
        while (!isInterrupted()) {
            List<Map<String, Object>> brokers = lookup();
            if (brokers != null && !brokers.equals(previous)) {
                Map<String, Object> e = new LinkedHashMap<>();
                e.put("cluster", cluster);
                e.put("kind", "route");
                e.put("event_id", String.format("%s-route-%04d", id, n++));
                e.put("event_time", System.currentTimeMillis());
                e.put("topic", topic);
                e.put("brokers", brokers);
                events.write(e);
                previous = brokers;
            }
            try {
                Thread.sleep(periodMs);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    private List<Map<String, Object>> lookup() {
        try {
            Object route = producer.getDefaultMQProducerImpl().getmQClientFactory().getMQClientAPIImpl()
                .getTopicRouteInfoFromNameServer(topic, 3000);
            Set<Object> withMaster = new HashSet<>();
            for (Object b : (List<?>) get(route, "getBrokerDatas")) {
                Map<?, ?> addrs = (Map<?, ?>) get(b, "getBrokerAddrs");
                if (addrs != null && addrs.containsKey(0L)) {
                    withMaster.add(get(b, "getBrokerName"));
                }
            }
            Map<String, Map<String, Object>> brokers = new TreeMap<>();
            for (Object q : (List<?>) get(route, "getQueueDatas")) {
                String name = (String) get(q, "getBrokerName");
                if (withMaster.contains(name)) {
                    Map<String, Object> b = new LinkedHashMap<>();
                    b.put("broker_name", name);
                    b.put("write_queue_nums", get(q, "getWriteQueueNums"));
                    b.put("perm", get(q, "getPerm"));
                    brokers.put(name, b);
                }
            }
            return new ArrayList<>(brokers.values());
        } catch (Exception e) {
            return null;
        }
    }

    private static Object get(Object target, String getter) throws ReflectiveOperationException {
        return target.getClass().getMethod(getter).invoke(target);
    }
}
