package io.faultline.rocketmq;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.Map;
import java.util.TreeMap;

import org.apache.rocketmq.client.producer.DefaultMQProducer;

/**
 * A producer's own fault table, the {@code LatencyFaultTolerance} its {@code MQFaultStrategy}
 * keeps ({@code DefaultMQProducerImpl.mqFaultStrategy.latencyFaultTolerance}, private fields of
 * the same names in 4.7.1, 4.9.7 and 5.3.x, reached by reflection), and its items
 * ({@code faultItemTable}: broker name to {@code FaultItem}, whose {@code startTimestamp} is the
 * time the broker is available again).
 *
 * <p>Writing goes through the table's own {@code updateFaultItem}: {@code (name, currentLatency,
 * notAvailableDuration)} in 4.x, which sets the item's start to now plus the duration;
 * {@code (name, currentLatency, notAvailableDuration, reachable)} in 5.x, which only ever
 * extends it. An exact time, earlier than the item's, is set on the item itself
 * ({@code FaultItem.setStartTimestamp}, in every version).
 */
final class ProducerFaultTable {
    private static final String TOLERANCE = "org.apache.rocketmq.client.latency.LatencyFaultTolerance";

    private final DefaultMQProducer producer;
    private final Object tolerance;
    private final Map<?, ?> items;
    private final Method update;
    private final boolean reachable;
    private final long isolationLatency;
    private volatile Accessors accessors;

    /** The item's fields and setter, from the first item's class. */
    private static final class Accessors {
        final Field start;
        final Field latency;
        final Field reachableFlag;
        final Method setStart;

        Accessors(Class<?> item) throws ReflectiveOperationException {
            start = declared(item, "startTimestamp");
            latency = declared(item, "currentLatency");
            Field r;
            try {
                r = declared(item, "reachableFlag");
            } catch (NoSuchFieldException e) {
                r = null;
            }
            reachableFlag = r;
            setStart = item.getDeclaredMethod("setStartTimestamp", long.class);
            setStart.setAccessible(true);
        }
    }

    ProducerFaultTable(DefaultMQProducer producer) throws ReflectiveOperationException {
        this.producer = producer;
        Object impl = producer.getDefaultMQProducerImpl();
        Object strategy = field(impl, "mqFaultStrategy");
        this.tolerance = field(strategy, "latencyFaultTolerance");
        this.items = (Map<?, ?>) field(tolerance, "faultItemTable");
        Class<?> api = Class.forName(TOLERANCE, false, tolerance.getClass().getClassLoader());
        Method four = null;
        try {
            four = api.getMethod("updateFaultItem", Object.class, long.class, long.class, boolean.class);
        } catch (NoSuchMethodException e) {
            // 4.x
        }
        this.reachable = four != null;
        this.update = four != null ? four : api.getMethod("updateFaultItem", Object.class, long.class, long.class);
        // what the client's own updateFaultItem(broker, latency, isolation=true) writes
        this.isolationLatency = reachable ? 10_000L : 30_000L;
    }

    DefaultMQProducer producer() {
        return producer;
    }

    /** Whether the producer's selection reads its fault table at all. */
    boolean latencyFaultEnabled() {
        return producer.isSendLatencyFaultEnable();
    }

    /** The client line this table is of: "5" (the four-argument update) or "4". */
    String line() {
        return reachable ? "5" : "4";
    }

    /** When the broker's item is available again, or {@code Long.MIN_VALUE} without an item. */
    long availableFrom(String broker) throws ReflectiveOperationException {
        Object item = items.get(broker);
        if (item == null) {
            return Long.MIN_VALUE;
        }
        return accessors(item).start.getLong(item);
    }

    /**
     * Hold the broker until {@code until} through the table's own update, keeping the item's
     * latency and reachability (a new item takes the latency the client's own isolation writes).
     * Returns the item's start after it.
     */
    long isolate(String broker, long until) throws ReflectiveOperationException {
        Object item = items.get(broker);
        long latency = isolationLatency;
        boolean reach = true;
        if (item != null) {
            Accessors a = accessors(item);
            latency = a.latency.getLong(item);
            if (a.reachableFlag != null) {
                reach = a.reachableFlag.getBoolean(item);
            }
        }
        long before = availableFrom(broker);
        long duration = Math.max(1, until - System.currentTimeMillis());
        if (reachable) {
            update.invoke(tolerance, broker, latency, duration, reach);
        } else {
            update.invoke(tolerance, broker, latency, duration);
        }
        // the update adds the duration to its own clock, a millisecond or more later than ours:
        // ours is the exact end, unless the item already ended later (the producer's own)
        if (before <= until && availableFrom(broker) > until) {
            setAvailableFrom(broker, until);
        }
        return availableFrom(broker);
    }

    /** Set the item's start to exactly {@code at} (no-op without an item). */
    void setAvailableFrom(String broker, long at) throws ReflectiveOperationException {
        Object item = items.get(broker);
        if (item != null) {
            accessors(item).setStart.invoke(item, at);
        }
    }

    /** Each item's latency and start, by broker name. */
    Map<String, long[]> snapshot() throws ReflectiveOperationException {
        Map<String, long[]> out = new TreeMap<>();
        for (Map.Entry<?, ?> e : items.entrySet()) {
            Accessors a = accessors(e.getValue());
            out.put(String.valueOf(e.getKey()), new long[] {a.latency.getLong(e.getValue()), a.start.getLong(e.getValue())});
        }
        return out;
    }

    private Accessors accessors(Object item) throws ReflectiveOperationException {
        Accessors a = accessors;
        if (a == null) {
            a = new Accessors(item.getClass());
            accessors = a;
        }
        return a;
    }

    private static Field declared(Class<?> type, String name) throws NoSuchFieldException {
        Field f = type.getDeclaredField(name);
        f.setAccessible(true);
        return f;
    }

    static Object field(Object target, String name) throws ReflectiveOperationException {
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
