package io.faultline.rocketmq.report;

import java.util.HashMap;
import java.util.Map;

/**
 * The producer's own fault table as the reporter keeps it: {@code LatencyFaultToleranceImpl} plus
 * {@code MQFaultStrategy.updateFaultItem} with the latency fault switch on
 * ({@code udfs.rocketmq._fault.FaultTable}), only what the rule reads: whether a broker is
 * available at an event time. Not thread-safe.
 *
 * <ul>
 * <li>4.x overwrites: every update sets the item's latency and {@code startTimestamp = now +
 * duration}, so a fast success clears a 10-minute isolation at once.</li>
 * <li>5.x extends only: the latency and reachable flag are overwritten, {@code startTimestamp}
 * moves only to a later {@code now + duration}, never for a duration of 0.</li>
 * <li>available: {@code now >= startTimestamp}; a broker without an item is available.</li>
 * <li>an update older than the item's last is ignored (faultline's last-writer-wins).</li>
 * </ul>
 */
public final class FaultTable {

    /** One broker's item. */
    static final class Item {
        long currentLatency;
        long startTimestamp;
        boolean reachable = true;
        long updatedAt;
    }

    private final Profile profile;
    private final Map<String, Item> items = new HashMap<String, Item>();

    public FaultTable(Profile profile) {
        this.profile = profile;
    }

    /**
     * {@code LatencyFaultTolerance.updateFaultItem}: overwrite (4.x) or extend-only (5.x). Returns
     * false when the update is older than the broker's item and changes nothing.
     */
    public boolean update(String broker, long latencyMs, long notAvailableMs, long nowMs, boolean reachable) {
        Item item = items.get(broker);
        if (item != null && nowMs < item.updatedAt) {
            return false;
        }
        if (item == null) {
            item = new Item();
            items.put(broker, item);
        }
        if (profile.isFive()) {
            if (notAvailableMs > 0 && nowMs + notAvailableMs > item.startTimestamp) {
                item.startTimestamp = nowMs + notAvailableMs;
            }
            item.reachable = reachable;
        } else {
            item.startTimestamp = nowMs + notAvailableMs;
            item.reachable = true;
        }
        item.currentLatency = latencyMs;
        item.updatedAt = nowMs;
        return true;
    }

    /** {@code MQFaultStrategy.updateFaultItem}: the duration of the measured latency, or of the
     * profile's substitute with {@code isolation}; the item keeps the measured latency. */
    public boolean report(String broker, long latencyMs, boolean isolation, long nowMs, boolean reachable) {
        return update(broker, latencyMs, profile.notAvailableDuration(latencyMs, isolation), nowMs, reachable);
    }

    /** Whether the broker takes sends at {@code nowMs}: brokers without an item do. */
    public boolean isAvailable(String broker, long nowMs) {
        Item item = items.get(broker);
        return item == null || nowMs >= item.startTimestamp;
    }

    /** 5.x {@code isReachable}: the flag, true for brokers without an item. */
    public boolean isReachable(String broker) {
        Item item = items.get(broker);
        return item == null || item.reachable;
    }

    /** When the broker is available again (0 without an item). */
    public long availableFrom(String broker) {
        Item item = items.get(broker);
        return item == null ? 0 : item.startTimestamp;
    }

    public int size() {
        return items.size();
    }
}
