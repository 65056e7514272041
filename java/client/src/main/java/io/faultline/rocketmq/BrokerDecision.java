package io.faultline.rocketmq;

import java.util.Objects;

/**
 * The latest decision a follower read about one broker: a message of the decisions topic (key
 * {@code broker/<cluster>/<broker>}, a {@code broker_decisions} row of the cluster scope with its
 * {@code state}), with when it was read and until when it keeps the broker away.
 *
 * <p>{@link #heldUntil()} is {@link DecisionView#heldUntil}: an isolation (or probation) holds
 * until its {@code available_from}, and, read while following the topic live, at least its whole
 * duration from when it was read (as Python's {@code streaming.client.held_until}); a broker out
 * of the route for {@link FaultlineFollower.Builder#outOfRouteHoldMs} from when the NameServer
 * dropped it (from when it was read, live); nothing longer than
 * {@link FaultlineFollower.Builder#maxHoldMs} from when it was read. Past it the decision keeps
 * nothing away, whether or not a later message said so.
 */
public final class BrokerDecision {
    /** What a decision means to a producer: the topic's {@code state}. */
    public enum State {
        ISOLATED,
        AVAILABLE,
        /** Takes {@link #share()} of the sends (recovery probing). */
        PROBING,
        OUT_OF_ROUTE
    }

    private static final double GOLDEN = 0.6180339887498949;

    private final String cluster;
    private final String broker;
    private final String decision;
    private final State state;
    private final long effectiveAt;
    private final long availableFrom;
    private final double share;
    private final String reason;
    private final long seenAt;
    private final boolean live;
    private final long heldUntil;

    BrokerDecision(String cluster, String broker, String decision, State state, long effectiveAt,
                   long availableFrom, double share, String reason, long seenAt, boolean live,
                   long heldUntil) {
        this.cluster = cluster;
        this.broker = broker;
        this.decision = decision;
        this.state = state;
        this.effectiveAt = effectiveAt;
        this.availableFrom = availableFrom;
        this.share = share;
        this.reason = reason;
        this.seenAt = seenAt;
        this.live = live;
        this.heldUntil = heldUntil;
    }

    public String cluster() {
        return cluster;
    }

    public String broker() {
        return broker;
    }

    /** The {@code broker_decisions.decision}: {@code ISOLATE}, {@code RESTORE}, {@code PROBE}... */
    public String decision() {
        return decision;
    }

    public State state() {
        return state;
    }

    /** When faultline made the decision (event time, epoch ms). */
    public long effectiveAt() {
        return effectiveAt;
    }

    /** When faultline has the broker available again (epoch ms). */
    public long availableFrom() {
        return availableFrom;
    }

    /** The share of the sends a broker on probation takes (1 in any other state). */
    public double share() {
        return share;
    }

    public String reason() {
        return reason;
    }

    /** When this follower read it (its clock, epoch ms). */
    public long seenAt() {
        return seenAt;
    }

    /** Read while following the topic, not while catching up with it at the start. */
    public boolean live() {
        return live;
    }

    /** Until when it keeps the broker away (epoch ms; 0: never). */
    public long heldUntil() {
        return heldUntil;
    }

    /** Whether it keeps the broker away, wholly or for a share of the sends, at {@code now}. */
    public boolean holds(long now) {
        return state != State.AVAILABLE && now < heldUntil;
    }

    /**
     * Whether the broker may take a send at {@code now}: not while isolated or out of the route;
     * on probation, {@code ticket} (a number that changes from send to send, such as a counter)
     * decides, so that consecutive tickets spread the {@link #share()} evenly, as Python's
     * {@code DecisionView.is_available} does.
     */
    public boolean isAvailable(long now, long ticket) {
        if (!holds(now)) {
            return true;
        }
        if (state == State.PROBING) {
            double x = (ticket * GOLDEN) % 1.0;
            return (x < 0 ? x + 1.0 : x) < share;
        }
        return false;
    }

    /**
     * Until when the producer's fault table should hold the broker at {@code now}, or 0 when it
     * should not: an isolation or an absence from the route until {@link #heldUntil()}; a
     * probation in periods of {@code periodMs}, counted from when it was read, open for the first
     * {@code share} of each period and closed for the rest (the producer's selection cannot ask
     * per send, so its share of the sends is a share of the time).
     */
    long blockedUntil(long now, long periodMs) {
        if (!holds(now)) {
            return 0;
        }
        if (state != State.PROBING) {
            return heldUntil;
        }
        if (share >= 1.0) {
            return 0;
        }
        long period = Math.max(1, periodMs);
        long phase = Math.floorMod(now - seenAt, period);
        if (phase < share * period) {
            return 0;
        }
        return Math.min(now - phase + period, heldUntil);
    }

    /**
     * When a probation open at {@code now} closes (the next time {@link #blockedUntil} turns
     * from 0 to a time), or {@code Long.MAX_VALUE}: the follower writes the hold then, not at its
     * next round. Every other change needs no write on time: a hold ends by itself.
     */
    long nextClosing(long now, long periodMs) {
        if (state != State.PROBING || !holds(now) || share >= 1.0) {
            return Long.MAX_VALUE;
        }
        long period = Math.max(1, periodMs);
        long phase = Math.floorMod(now - seenAt, period);
        long open = (long) Math.ceil(share * period);
        long closing = phase < open ? now - phase + open : now - phase + period + open;
        return closing < heldUntil ? closing : Long.MAX_VALUE;
    }

    @Override
    public boolean equals(Object o) {
        if (!(o instanceof BrokerDecision)) {
            return false;
        }
        BrokerDecision d = (BrokerDecision) o;
        return cluster.equals(d.cluster) && broker.equals(d.broker) && decision.equals(d.decision)
            && state == d.state && effectiveAt == d.effectiveAt && availableFrom == d.availableFrom
            && Double.compare(share, d.share) == 0 && Objects.equals(reason, d.reason)
            && seenAt == d.seenAt && live == d.live && heldUntil == d.heldUntil;
    }

    @Override
    public int hashCode() {
        return Objects.hash(cluster, broker, decision, seenAt);
    }

    @Override
    public String toString() {
        return "BrokerDecision{" + cluster + "/" + broker + " " + decision + " " + state
            + ", effectiveAt=" + effectiveAt + ", availableFrom=" + availableFrom
            + (state == State.PROBING ? ", share=" + share : "") + ", seenAt=" + seenAt
            + (live ? "" : " (catching up)") + ", heldUntil=" + heldUntil + "}";
    }
}
