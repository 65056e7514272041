package io.faultline.rocketmq.report;

import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;

/**
 * A RocketMQ client profile's constants, as {@code udfs/rocketmq/_profiles.py} models them: the
 * subset the reporter's rule reads. The latency bands ({@code MQFaultStrategy.latencyMax} and
 * {@code notAvailableDuration}) decide which latency isolates a broker, the substitute latency
 * an attempt reported with {@code isolation} is looked up with, and the response codes a SYNC
 * send retries.
 *
 * <ul>
 * <li>4.x ({@code rocketmq-4.7}, {@code rocketmq-4.9}): latencies 50, 100, 550, 1000, 2000, 3000,
 * 15000 ms isolate for 0, 0, 30000, 60000, 120000, 180000, 600000 ms; {@code isolation} looks up
 * 30000 (10 minutes);</li>
 * <li>5.x ({@code rocketmq-5}): 50, 100, 550, 1800, 3000, 5000, 15000 ms isolate for 0, 0, 2000,
 * 5000, 6000, 10000, 30000 ms; {@code isolation} looks up 10000 (10 s).</li>
 * </ul>
 */
public final class Profile {
    private static final long[] LATENCY_MAX_4 = {50, 100, 550, 1000, 2000, 3000, 15000};
    private static final long[] NOT_AVAILABLE_4 = {0, 0, 30000, 60000, 120000, 180000, 600000};
    private static final long[] LATENCY_MAX_5 = {50, 100, 550, 1800, 3000, 5000, 15000};
    private static final long[] NOT_AVAILABLE_5 = {0, 0, 2000, 5000, 6000, 10000, 30000};
    // TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE, SYSTEM_ERROR, NO_PERMISSION, NO_BUYER_ID,
    // NOT_IN_CURRENT_UNIT; 5.x adds SYSTEM_BUSY and GO_AWAY.
    private static final Set<Integer> RETRY_CODES_4 = codes(17, 14, 1, 16, 204, 205);
    private static final Set<Integer> RETRY_CODES_5 = codes(17, 14, 1, 16, 204, 205, 2, 1500);

    private static final Map<String, Profile> PROFILES;

    static {
        Map<String, Profile> p = new LinkedHashMap<String, Profile>();
        p.put("rocketmq-4.7", new Profile("rocketmq-4.7", "4.7", LATENCY_MAX_4, NOT_AVAILABLE_4, 30000, RETRY_CODES_4));
        p.put("rocketmq-4.9", new Profile("rocketmq-4.9", "4.9", LATENCY_MAX_4, NOT_AVAILABLE_4, 30000, RETRY_CODES_4));
        p.put("rocketmq-5", new Profile("rocketmq-5", "5", LATENCY_MAX_5, NOT_AVAILABLE_5, 10000, RETRY_CODES_5));
        PROFILES = Collections.unmodifiableMap(p);
    }

    private final String name;
    private final String line;
    private final long[] latencyMax;
    private final long[] notAvailableDuration;
    private final long isolationLatency;
    private final Set<Integer> retryResponseCodes;
    private final long isolatingMs;

    private Profile(String name, String line, long[] latencyMax, long[] notAvailableDuration,
                    long isolationLatency, Set<Integer> retryResponseCodes) {
        this.name = name;
        this.line = line;
        this.latencyMax = latencyMax;
        this.notAvailableDuration = notAvailableDuration;
        this.isolationLatency = isolationLatency;
        this.retryResponseCodes = retryResponseCodes;
        long lowest = Long.MAX_VALUE;
        for (int i = 0; i < latencyMax.length; i++) {
            if (notAvailableDuration[i] > 0) {
                lowest = Math.min(lowest, latencyMax[i]);
            }
        }
        this.isolatingMs = lowest;
    }

    /** The profile of that name: {@code rocketmq-4.7}, {@code rocketmq-4.9} or {@code rocketmq-5}. */
    public static Profile named(String name) {
        Profile p = PROFILES.get(name);
        if (p == null) {
            throw new IllegalArgumentException("unknown client profile '" + name + "': expected one of "
                    + PROFILES.keySet());
        }
        return p;
    }

    /** The profile names, in order. */
    public static Set<String> names() {
        return PROFILES.keySet();
    }

    /** The same profile with the response codes a SYNC send retries replaced
     * ({@code DefaultMQProducer.retryResponseCodes}, configurable since 4.9.2). */
    public Profile withRetryResponseCodes(Set<Integer> codes) {
        return new Profile(name, line, latencyMax, notAvailableDuration, isolationLatency,
                Collections.unmodifiableSet(new HashSet<Integer>(codes)));
    }

    public String name() {
        return name;
    }

    /** The behaviour family: {@code 4.7}, {@code 4.9} or {@code 5}. */
    public String line() {
        return line;
    }

    /** Whether this is 5.x (extend-only fault items, its own isolations per outcome). */
    public boolean isFive() {
        return "5".equals(line);
    }

    /** The latency bands' lower bounds (a copy): the summaries' histogram buckets. */
    public long[] latencyMax() {
        return latencyMax.clone();
    }

    /** Whether a SYNC send retries a broker error with this response code. */
    public boolean retries(Integer responseCode) {
        return responseCode != null && retryResponseCodes.contains(responseCode);
    }

    /** The lowest latency that isolates a broker (a band with a non-zero duration): 550 ms in every
     * shipped profile. A send this slow changes a decision, so the reporter sends it in full. */
    public long isolatingMs() {
        return isolatingMs;
    }

    /**
     * {@code MQFaultStrategy.computeNotAvailableDuration}: the isolation in ms for a latency, from
     * the last band down, bounds inclusive; 0 below the first. With {@code isolation} the profile's
     * substitute latency is looked up instead of {@code latencyMs}.
     */
    public long notAvailableDuration(long latencyMs, boolean isolation) {
        long latency = isolation ? isolationLatency : latencyMs;
        for (int i = latencyMax.length - 1; i >= 0; i--) {
            if (latency >= latencyMax[i]) {
                return notAvailableDuration[i];
            }
        }
        return 0;
    }

    private static Set<Integer> codes(Integer... codes) {
        return Collections.unmodifiableSet(new HashSet<Integer>(Arrays.asList(codes)));
    }

    @Override
    public String toString() {
        return name;
    }
}
