package io.faultline.rocketmq;

import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The latest decisions about each broker, as read from the decisions topic: the Java side of
 * Python's {@code streaming.client.DecisionView}, for the present only (Python's keeps every
 * message with its time, for the simulator's questions about any instant).
 *
 * <p>A broker has two independent states, each the latest message of its own key: its FaultItem's
 * ({@code broker/<cluster>/<broker>}: isolated, on probation or available) and its place in the
 * NameServer's route ({@code broker-route/<cluster>/<broker>}: out of the route or back). It is
 * available only when neither keeps it away: a {@code ROUTE_RESTORED} does not end an isolation,
 * nor a {@code PROBE} an absence from the route.
 *
 * <p>A broker nobody decided about is available: faultline only ever narrows the choice. Every
 * method is safe to call from any thread; none throws for a message it cannot use (it is counted
 * and skipped).
 */
public final class DecisionView {
    /** The key prefix of a broker's FaultItem decisions; {@code route/} and {@code transaction/} are others. */
    static final String BROKER_KEYS = "broker/";
    /** The key prefix of a broker's route decisions ({@code ROUTE_EXPIRED}, {@code ROUTE_RESTORED}). */
    static final String ROUTE_KEYS = "broker-route/";

    private static final Map<String, BrokerDecision.State> STATES;

    static {
        Map<String, BrokerDecision.State> s = new HashMap<>();
        for (String d : new String[] {"ISOLATE", "EXTEND", "SHORTEN", "OUTLIER", "HOLD"}) {
            s.put(d, BrokerDecision.State.ISOLATED);
        }
        for (String d : new String[] {"RESTORE", "ROUTE_RESTORED", "PANIC", "RELEASE"}) {
            s.put(d, BrokerDecision.State.AVAILABLE);
        }
        s.put("PROBE", BrokerDecision.State.PROBING);
        s.put("ROUTE_EXPIRED", BrokerDecision.State.OUT_OF_ROUTE);
        STATES = Collections.unmodifiableMap(s);
    }

    private final long outOfRouteHoldMs;
    private final long maxHoldMs;
    /** The FaultItem's latest decision, per cluster and broker. */
    private final Map<String, Map<String, BrokerDecision>> byCluster = new ConcurrentHashMap<>();
    /** The route's latest decision, per cluster and broker. */
    private final Map<String, Map<String, BrokerDecision>> routes = new ConcurrentHashMap<>();
    private final AtomicLong skipped = new AtomicLong();
    private final AtomicLong calls = new AtomicLong();

    /**
     * @param outOfRouteHoldMs how long a broker the NameServer dropped is kept away
     * @param maxHoldMs the longest any decision keeps a broker away from when it was read
     */
    public DecisionView(long outOfRouteHoldMs, long maxHoldMs) {
        this.outOfRouteHoldMs = outOfRouteHoldMs;
        this.maxHoldMs = maxHoldMs;
    }

    /**
     * The state a {@code broker_decisions.decision} means to a producer ({@code
     * streaming.client.decision_state}), or null for one that is not about a broker's state.
     */
    public static BrokerDecision.State stateOf(String decision) {
        return decision == null ? null : STATES.get(decision);
    }

    /**
     * Until when a decision read at {@code seenAt} keeps its broker away (0: not at all). An
     * isolation or probation ends at {@code availableFrom}; read {@code live} (following the
     * topic, not catching up with its old messages at the start), at least its whole duration
     * from {@code seenAt}, so that a decision read late is not over before it is used (Python's
     * {@code held_until}). A broker out of the route is kept away {@code outOfRouteHoldMs} from
     * when the NameServer dropped it (live: from {@code seenAt}), the time a producer takes to
     * poll its route (30 s by default), after which its own route knows. Nothing is held longer
     * than {@code maxHoldMs} from {@code seenAt}.
     */
    public static long heldUntil(BrokerDecision.State state, long effectiveAt, long availableFrom,
                                 long seenAt, boolean live, long outOfRouteHoldMs, long maxHoldMs) {
        long end;
        long duration;
        switch (state) {
            case ISOLATED:
            case PROBING:
                end = availableFrom;
                duration = Math.max(0, availableFrom - effectiveAt);
                break;
            case OUT_OF_ROUTE:
                end = effectiveAt + outOfRouteHoldMs;
                duration = outOfRouteHoldMs;
                break;
            default:
                return 0;
        }
        long until = live ? Math.max(end, seenAt + duration) : end;
        return Math.min(until, seenAt + maxHoldMs);
    }

    /**
     * One message of the decisions topic, read at {@code seenAt}: its key and its value (JSON;
     * null for a tombstone, which forgets that state of the broker). Other keys than {@code
     * broker/...} and {@code broker-route/...}, other scopes than {@code cluster} and decisions
     * about no broker's state are skipped. Returns the decision it recorded, or null.
     */
    public BrokerDecision apply(String key, String value, long seenAt, boolean live) {
        String prefix = key == null ? null
            : key.startsWith(BROKER_KEYS) ? BROKER_KEYS : key.startsWith(ROUTE_KEYS) ? ROUTE_KEYS : null;
        if (prefix == null) {
            return null;
        }
        if (value == null) {
            String[] parts = key.substring(prefix.length()).split("/", 2);
            if (parts.length == 2) {
                Map<String, BrokerDecision> brokers = (ROUTE_KEYS.equals(prefix) ? routes : byCluster).get(parts[0]);
                if (brokers != null) {
                    brokers.remove(parts[1]);
                }
            }
            return null;
        }
        Map<String, Object> row;
        try {
            row = Json.object(value);
        } catch (Exception e) {
            skipped.incrementAndGet();
            return null;
        }
        return apply(row, seenAt, live);
    }

    /** A message's value already parsed (see {@link #apply(String, String, long, boolean)}). */
    public BrokerDecision apply(Map<String, Object> row, long seenAt, boolean live) {
        Object scope = row.get("scope");
        String cluster = text(row.get("cluster"));
        String broker = text(row.get("broker_name"));
        String decision = text(row.get("decision"));
        if ((scope != null && !"cluster".equals(scope)) || cluster == null || broker == null
            || broker.isEmpty()) {
            skipped.incrementAndGet();
            return null;
        }
        BrokerDecision.State state = null;
        String said = text(row.get("state"));
        if (said != null) {
            try {
                state = BrokerDecision.State.valueOf(said);
            } catch (IllegalArgumentException e) {
                state = null;
            }
        } else {
            state = stateOf(decision);
        }
        Long effectiveAt = number(row.get("effective_at"));
        Long availableFrom = number(row.get("available_from"));
        if (state == null || effectiveAt == null
            || (availableFrom == null && state != BrokerDecision.State.AVAILABLE
                && state != BrokerDecision.State.OUT_OF_ROUTE)) {
            skipped.incrementAndGet();  // never a guess: an unknown state changes nothing
            return null;
        }
        long from = availableFrom == null ? effectiveAt : availableFrom;
        double share = 1.0;
        if (state == BrokerDecision.State.PROBING) {
            Object s = row.get("share");
            share = s instanceof Number && ((Number) s).doubleValue() != 0 ? ((Number) s).doubleValue() : 1.0;
        }
        boolean route = state == BrokerDecision.State.OUT_OF_ROUTE || "ROUTE_RESTORED".equals(decision);
        Map<String, BrokerDecision> brokers = (route ? routes : byCluster)
            .computeIfAbsent(cluster, c -> new ConcurrentHashMap<>());
        BrokerDecision known = brokers.get(broker);
        if (known != null && known.state() == state && known.effectiveAt() == effectiveAt
            && known.availableFrom() == from && Double.compare(known.share(), share) == 0
            && known.decision().equals(decision == null ? state.name() : decision)) {
            return known;  // the same decision again (read again, or published again): as first read
        }
        long until = heldUntil(state, effectiveAt, from, seenAt, live, outOfRouteHoldMs, maxHoldMs);
        BrokerDecision d = new BrokerDecision(cluster, broker, decision == null ? state.name() : decision,
            state, effectiveAt, from, share, text(row.get("reason")), seenAt, live, until);
        brokers.put(broker, d);
        return d;
    }

    /** The latest decision about the broker's FaultItem, or null. */
    public BrokerDecision get(String cluster, String broker) {
        return latest(byCluster, cluster, broker);
    }

    /** The latest decision about the broker's place in the route, or null. */
    public BrokerDecision route(String cluster, String broker) {
        return latest(routes, cluster, broker);
    }

    private static BrokerDecision latest(Map<String, Map<String, BrokerDecision>> in, String cluster, String broker) {
        Map<String, BrokerDecision> brokers = in.get(cluster);
        return brokers == null ? null : brokers.get(broker);
    }

    /**
     * Whether faultline lets {@code broker} take a send at {@code now}: not while out of the
     * route, nor while isolated; on probation {@code ticket} decides (see {@link
     * BrokerDecision#isAvailable}).
     */
    public boolean isAvailable(String cluster, String broker, long now, long ticket) {
        BrokerDecision r = route(cluster, broker);
        BrokerDecision d = get(cluster, broker);
        return (r == null || !r.holds(now)) && (d == null || d.isAvailable(now, ticket));
    }

    /** {@link #isAvailable(String, String, long, long)} with the calls counted as the tickets. */
    public boolean isAvailable(String cluster, String broker, long now) {
        BrokerDecision r = route(cluster, broker);
        BrokerDecision d = get(cluster, broker);
        if (r != null && r.holds(now)) {
            return false;
        }
        return d == null || !d.holds(now) || d.isAvailable(now, calls.incrementAndGet());
    }

    /**
     * Until when the producer's table should hold {@code broker} at {@code now} (0: not at all):
     * the later of its FaultItem's hold ({@link BrokerDecision#blockedUntil}) and its absence
     * from the route.
     */
    long blockedUntil(String cluster, String broker, long now, long periodMs) {
        BrokerDecision r = route(cluster, broker);
        BrokerDecision d = get(cluster, broker);
        return Math.max(r == null ? 0 : r.blockedUntil(now, periodMs), d == null ? 0 : d.blockedUntil(now, periodMs));
    }

    /**
     * The decision that sets {@link #blockedUntil} (of the two, the one that holds longer; when
     * neither holds, the FaultItem's, else the route's), or null when there is none.
     */
    BrokerDecision deciding(String cluster, String broker, long now, long periodMs) {
        BrokerDecision r = route(cluster, broker);
        BrokerDecision d = get(cluster, broker);
        if (r == null || d == null) {
            return d == null ? r : d;
        }
        return r.blockedUntil(now, periodMs) > d.blockedUntil(now, periodMs) ? r : d;
    }

    /** The latest decision about each broker's FaultItem in {@code cluster}, by broker name (a copy). */
    public Map<String, BrokerDecision> decisions(String cluster) {
        return copy(byCluster, cluster);
    }

    /** The latest decision about each broker's place in the route in {@code cluster} (a copy). */
    public Map<String, BrokerDecision> routes(String cluster) {
        return copy(routes, cluster);
    }

    private static Map<String, BrokerDecision> copy(Map<String, Map<String, BrokerDecision>> in, String cluster) {
        Map<String, BrokerDecision> brokers = in.get(cluster);
        return brokers == null ? Collections.<String, BrokerDecision>emptyMap()
            : Collections.unmodifiableMap(new TreeMap<>(brokers));
    }

    /** Messages about brokers that could not be used (not JSON, an unknown state, ...). */
    public long skipped() {
        return skipped.get();
    }

    private static String text(Object value) {
        return value == null ? null : value.toString();
    }

    private static Long number(Object value) {
        return value instanceof Number ? ((Number) value).longValue() : null;
    }
}
