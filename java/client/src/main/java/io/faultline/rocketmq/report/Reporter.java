package io.faultline.rocketmq.report;

import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;

/**
 * What a producer calls after each send attempt ({@link #send}) and a consumer after each consume
 * ({@link #consume}), and at shutdown ({@link #close}): a port of Python's
 * {@code streaming.client.Reporter} (docs/producers/summaries.md) that hands its sink
 * the same bytes for the same calls (the shared vectors in {@code tests/vectors/reporter}).
 *
 * <p><b>The rule.</b> It reports in full every send that can change a decision, and summarizes
 * the rest per (topic, broker, mode) over windows of {@code windowMs} of event time, aligned to
 * the epoch. A send is reported in full when it
 * <ul>
 * <li>is not {@code SEND_OK} (a failure, a timeout, a store that is not OK);</li>
 * <li>is a retry ({@code attempt > 0}: routing decisions are made from it);</li>
 * <li>took a latency in an isolating band of its profile (550 ms and more in every shipped one);</li>
 * <li>went to a broker the producer's own fault table holds not yet available at its event time,
 * with the latency fault switch on (RocketMQ 4.x overwrites an isolation with the next answer);
 * the reporter keeps that table itself from the sends it is given ({@link FaultTable}), as the
 * job's {@code producer} scope does;</li>
 * <li>is delayed ({@code delay_level}), redelivered ({@code redelivery_count}) or transactional.</li>
 * </ul>
 * Every other send is a {@code SEND_OK} first attempt whose only effect is its broker's latest
 * latency: a summary carries the first and the last of its window (all a fault item keeps of
 * them), and their count, sum, maximum and histogram for the latency-outlier windows. A consume
 * that is not {@code CONSUME_SUCCESS} goes in full; successful ones are counted per (group, topic).
 *
 * <p><b>When a summary goes out</b>: when its window closes (at the first call at or after its
 * end, or at {@link #flush(long)}); before a full send to its broker (topic and broker, every
 * mode), so the job applies them in order; before any failed send of a 4.x producer with the
 * switch on (its retry may call {@code pickOneAtLeast}, which orders every broker by its latest
 * latency): then every send summary goes; when the producer's queue index of a topic goes back (a
 * 5.x retry resets it, a new route redraws it): every summary of that topic, so a summary's index
 * only grows; and at {@link #close}.
 *
 * <p><b>The buffer.</b> Nothing waits: records queue in a buffer of {@code buffer} records for
 * the {@link Sink}, which takes or refuses each at once; a refused record stays, in order, and is
 * offered again at the next record or flush. A full buffer drops a new summary before anything
 * else, drops its oldest summary to make room for a full event, and drops a full event only when
 * it holds nothing else. What it dropped is counted ({@link #dropped}) and told in the next
 * summary's {@code dropped} (an evicted summary's own count is carried on).
 *
 * <p><b>Event ids</b>: every {@code send} and {@code consume} call is numbered from 1, and an
 * event without an id of its own is {@code <producer_id>-r<n>}, {@code n} nine digits with
 * leading zeros. A summary's {@code event_id} is its last send's, {@code first_event_id} its
 * first's.
 *
 * <p><b>Not thread-safe</b>: one thread at a time (the hooks hold a lock around it). A sink that
 * throws counts as one that refuses: no exception from the sink reaches the caller.
 */
public final class Reporter {
    /** A summary's window of event time: the 10 s latency-outlier window (Python's {@code WINDOW_MS}). */
    public static final long WINDOW_MS = 10_000;
    /** Records a reporter holds while its sink refuses them (Python's {@code BUFFER}). */
    public static final int BUFFER = 10_000;

    private final String producerId;
    private final String cluster;
    private final String producerGroup;
    private final String clientProfile;
    private final boolean latencyFaultEnable;
    private final Profile profile;
    private final Sink sink;
    private final long windowMs;
    private final int buffer;
    private final long isolating;
    private final long[] bounds;
    /** The producer's own fault table; null with the latency fault switch off. */
    private final FaultTable table;

    /** The open windows, in the order they were opened (the order they go out together). */
    private final LinkedHashMap<WindowKey, Window> windows = new LinkedHashMap<WindowKey, Window>();
    /** The earliest end of an open window: a call before it closes none. */
    private long nextEnd = Long.MAX_VALUE;
    private final ArrayDeque<Pending> pending = new ArrayDeque<Pending>();
    private int pendingSummaries;
    /** Each topic's last queue index: a summary covers sends over which it only grew. */
    private final Map<String, Long> index = new HashMap<String, Long>();
    private long seq;
    private long dropped;
    private long untold;
    private long full;
    private long summarized;
    private long summaries;

    private Reporter(Builder b, Sink sink) {
        if (b.windowMs <= 0 || b.buffer <= 0) {
            throw new IllegalArgumentException("window_ms " + b.windowMs + " and buffer " + b.buffer
                    + " must be positive");
        }
        this.producerId = Objects.requireNonNull(b.producerId, "producerId");
        this.sink = Objects.requireNonNull(sink, "sink");
        this.profile = Profile.named(b.clientProfile);
        this.cluster = b.cluster;
        this.producerGroup = b.producerGroup;
        this.clientProfile = b.clientProfile;
        this.latencyFaultEnable = b.latencyFaultEnable;
        this.windowMs = b.windowMs;
        this.buffer = b.buffer;
        this.isolating = profile.isolatingMs();
        this.bounds = profile.latencyMax();
        this.table = b.latencyFaultEnable ? new FaultTable(profile) : null;
    }

    /** The settings of a reporter for this producer (or consumer) id; {@link Builder#build} makes it. */
    public static Builder builder(String producerId) {
        return new Builder(producerId);
    }

    /** A reporter's settings; the defaults are Python's. */
    public static final class Builder {
        private String producerId;
        private String cluster = "default";
        private String producerGroup;
        private String clientProfile = "rocketmq-4.9";
        private boolean latencyFaultEnable = true;
        private long windowMs = WINDOW_MS;
        private int buffer = BUFFER;

        private Builder(String producerId) {
            this.producerId = producerId;
        }

        /** The producer's id (RocketMQ's {@code clientId}): the records' key and the events' ids. */
        public Builder producerId(String producerId) {
            this.producerId = producerId;
            return this;
        }

        /** The RocketMQ cluster, as faultline names it (default {@code default}). */
        public Builder cluster(String cluster) {
            this.cluster = Objects.requireNonNull(cluster, "cluster");
            return this;
        }

        /** The producer group (default none: left out of the records). */
        public Builder producerGroup(String producerGroup) {
            this.producerGroup = producerGroup;
            return this;
        }

        /** {@code rocketmq-4.7}, {@code rocketmq-4.9} (default) or {@code rocketmq-5}. */
        public Builder clientProfile(String clientProfile) {
            Profile.named(clientProfile);
            this.clientProfile = clientProfile;
            return this;
        }

        /** The producer's {@code sendLatencyFaultEnable} (default true): off, it keeps no fault table. */
        public Builder latencyFaultEnable(boolean latencyFaultEnable) {
            this.latencyFaultEnable = latencyFaultEnable;
            return this;
        }

        /** A summary's window (default {@link #WINDOW_MS}); the job's outlier window must be a multiple. */
        public Builder windowMs(long windowMs) {
            this.windowMs = windowMs;
            return this;
        }

        /** The records held while the sink refuses (default {@link #BUFFER}). */
        public Builder buffer(int buffer) {
            this.buffer = buffer;
            return this;
        }

        /** A reporter with these settings, handing its records to {@code sink}. */
        public Reporter build(Sink sink) {
            return new Reporter(this, sink);
        }

        /** A copy, to change without changing this one. */
        public Builder copy() {
            Builder b = new Builder(producerId);
            b.cluster = cluster;
            b.producerGroup = producerGroup;
            b.clientProfile = clientProfile;
            b.latencyFaultEnable = latencyFaultEnable;
            b.windowMs = windowMs;
            b.buffer = buffer;
            return b;
        }
    }

    // -- the calls ------------------------------------------------------------------------------

    /** One send attempt's result. */
    public void send(SendEvent e) {
        String numbered = nextId(); // every call is numbered, with an id of its own or not
        String eventId = e.eventId != null ? e.eventId : numbered;
        long t = e.eventTime;
        String broker = e.brokerName;
        String topic = e.topic;
        closeWindows(t);
        if (e.queueIndex != null) {
            Long last = index.get(topic);
            if (last != null && e.queueIndex < last) { // a reset (5.x retry) or a new route
                out(WindowKey.SEND, topic, null);
            }
            index.put(topic, e.queueIndex);
        }
        if (inFull(e, t, broker)) {
            full++;
            // what came before it goes first: of its broker, or of every broker before a 4.x failure,
            // whose retry may order the whole table by latency (pickOneAtLeast)
            boolean every = table != null && !profile.isFive() && e.outcome != Outcome.SEND_OK;
            if (every) {
                out(WindowKey.SEND, null, null);
            } else {
                out(WindowKey.SEND, topic, broker);
            }
            TreeMap<String, Object> record = WireJson.record();
            putBase(record);
            record.put("kind", "send_result");
            e.putFields(record);
            record.put("event_id", eventId);
            emit(record, false);
        } else {
            summarized++;
            add(e, t, broker, eventId);
        }
        learn(e, t, broker);
    }

    /** One consume's result. */
    public void consume(ConsumeEvent e) {
        String numbered = nextId();
        String eventId = e.eventId != null ? e.eventId : numbered;
        long t = e.eventTime;
        closeWindows(t);
        if (!ConsumeEvent.CONSUME_SUCCESS.equals(e.status)) {
            full++;
            TreeMap<String, Object> record = WireJson.record();
            record.put("cluster", cluster);
            record.put("kind", "consume_result");
            e.putFields(record);
            record.put("event_id", eventId);
            emit(record, false);
            return;
        }
        summarized++;
        WindowKey key = new WindowKey(WindowKey.CONSUME, e.consumerGroup, e.topic, null);
        Window w = windows.get(key);
        if (w == null) {
            w = open(key, t);
        }
        w.messages++;
        w.eventId = eventId;
        w.eventTime = t;
    }

    /** Send the summaries whose window ended by {@code now} (epoch ms of event time), and hand the
     * buffer to the sink. */
    public void flush(long now) {
        closeWindows(now);
        drain();
    }

    /** Send every open summary, and hand the buffer to the sink. */
    public void flush() {
        out(null, null, null);
        drain();
    }

    /** At shutdown: every open summary goes out (what the sink refuses stays in {@link #pending}). */
    public void close() {
        flush();
    }

    // -- counters -------------------------------------------------------------------------------

    /** Sends and consumes reported in full. */
    public long full() {
        return full;
    }

    /** Sends and consumes summarized. */
    public long summarized() {
        return summarized;
    }

    /** Summaries handed to the buffer, less those a full buffer evicted. */
    public long summaries() {
        return summaries;
    }

    /** Records dropped for a full buffer, all told. */
    public long dropped() {
        return dropped;
    }

    /** Records waiting for the sink. */
    public int pending() {
        return pending.size();
    }

    /** Open summary windows. */
    public int openWindows() {
        return windows.size();
    }

    public String producerId() {
        return producerId;
    }

    public Profile profile() {
        return profile;
    }

    // -- the rule -------------------------------------------------------------------------------

    private boolean inFull(SendEvent e, long t, String broker) {
        return e.outcome != Outcome.SEND_OK
                || (e.attempt != null && e.attempt > 0)
                || e.latencyMs >= isolating
                || (e.delayLevel != null && e.delayLevel != 0)
                || (e.redeliveryCount != null && e.redeliveryCount != 0)
                || e.transaction != null
                || (table != null && !table.isAvailable(broker, t));
    }

    /** The producer's own fault table after the send, as the job's producer scope keeps it (every
     * update at the event's time). */
    private void learn(SendEvent e, long t, String broker) {
        if (table == null) {
            return;
        }
        SendMode mode = e.mode == null ? SendMode.SYNC : e.mode;
        int attempt = e.attempt == null ? 0 : e.attempt;
        AttemptEffect effect = AttemptEffect.of(profile, e.outcome, e.latencyMs, mode, attempt, e.responseCode);
        for (AttemptEffect.FaultReport r : effect.reports) {
            table.report(broker, r.dispatch ? 0 : e.latencyMs, r.isolation, t, r.reachable);
        }
    }

    // -- summaries ------------------------------------------------------------------------------

    private void add(SendEvent e, long t, String broker, String eventId) {
        WindowKey key = new WindowKey(WindowKey.SEND, e.topic, broker, e.modeName());
        Window w = windows.get(key);
        long latency = e.latencyMs;
        if (w == null) {
            w = open(key, t);
            w.firstTime = t;
            w.firstLatencyMs = latency;
            w.firstEventId = eventId;
            w.histogram = new long[bounds.length + 1];
            w.queueIndexStart = e.queueIndex;
        }
        w.messages++;
        w.latencyTotal += latency;
        w.latencyMax = Math.max(w.latencyMax, latency);
        w.histogram[bucket(latency)]++;
        w.eventId = eventId;
        w.eventTime = t;
        w.latencyMs = latency;
        if (e.queueIndex != null) {
            w.queueIndexEnd = e.queueIndex;
        }
    }

    /** Python's {@code bisect_right(bounds, latency)}: the bounds at or below the latency. */
    private int bucket(long latency) {
        int i = 0;
        while (i < bounds.length && bounds[i] <= latency) {
            i++;
        }
        return i;
    }

    private Window open(WindowKey key, long t) {
        Window w = new Window(key);
        w.windowStart = Math.floorDiv(t, windowMs) * windowMs;
        w.windowEnd = w.windowStart + windowMs;
        windows.put(key, w);
        nextEnd = Math.min(nextEnd, w.windowEnd);
        return w;
    }

    /** Send the windows whose key starts with these parts (null: any), in the order they opened. */
    private void out(String kind, String a, String b) {
        if (windows.isEmpty()) {
            return;
        }
        List<Window> going = null;
        for (Iterator<Window> it = windows.values().iterator(); it.hasNext(); ) {
            Window w = it.next();
            WindowKey k = w.key;
            if ((kind == null || kind.equals(k.kind)) && (a == null || a.equals(k.a)) && (b == null || b.equals(k.b))) {
                if (going == null) {
                    going = new ArrayList<Window>();
                }
                going.add(w);
                it.remove();
            }
        }
        emitWindows(going);
    }

    private void closeWindows(long t) {
        if (t < nextEnd) {
            return;
        }
        List<Window> going = new ArrayList<Window>();
        for (Iterator<Window> it = windows.values().iterator(); it.hasNext(); ) {
            Window w = it.next();
            if (w.windowEnd <= t) {
                going.add(w);
                it.remove();
            }
        }
        emitWindows(going);
    }

    private void emitWindows(List<Window> going) {
        if (going == null) {
            return;
        }
        long end = Long.MAX_VALUE;
        for (Window w : windows.values()) {
            end = Math.min(end, w.windowEnd);
        }
        nextEnd = end;
        for (Window w : going) {
            emit(w.record(this), true);
        }
    }

    private String nextId() {
        seq++;
        StringBuilder id = new StringBuilder(producerId.length() + 11).append(producerId).append("-r");
        String n = Long.toString(seq);
        for (int i = n.length(); i < 9; i++) {
            id.append('0');
        }
        return id.append(n).toString();
    }

    private void putBase(Map<String, Object> record) {
        record.put("cluster", cluster);
        record.put("producer_id", producerId);
        if (producerGroup != null) {
            record.put("producer_group", producerGroup);
        }
        record.put("client_profile", clientProfile);
        record.put("latency_fault_enable", latencyFaultEnable);
    }

    // -- the buffer -----------------------------------------------------------------------------

    private void emit(TreeMap<String, Object> record, boolean summary) {
        if (pending.size() >= buffer) {
            drain();
        }
        if (pending.size() >= buffer) {
            dropped++;
            untold++;
            if (summary || pendingSummaries == 0) {
                return;
            }
            for (Iterator<Pending> it = pending.iterator(); it.hasNext(); ) {
                Pending p = it.next();
                if (p.summary) { // the oldest summary makes room
                    it.remove();
                    pendingSummaries--;
                    untold += p.dropped; // what it would have told
                    summaries--;
                    break;
                }
            }
        }
        long told = 0;
        if (summary) {
            told = untold;
            record.put("dropped", told);
            untold = 0;
            summaries++;
        }
        pending.addLast(new Pending(key(record), WireJson.serialize(record), summary, told));
        if (summary) {
            pendingSummaries++;
        }
        drain();
    }

    /** A record's Kafka key: its producer id, else (a consumer's) its group, as Python's
     * {@code str(record.get("producer_id") or record.get("consumer_group"))}. */
    private static String key(Map<String, Object> record) {
        Object id = record.get("producer_id");
        if (id == null || "".equals(id)) {
            id = record.get("consumer_group");
        }
        return id == null ? "None" : id.toString();
    }

    /** Hand the buffer to the sink, oldest first, until it refuses one. */
    public void drain() {
        while (!pending.isEmpty()) {
            Pending p = pending.peekFirst();
            boolean taken;
            try {
                taken = sink.offer(p.key, p.value);
            } catch (RuntimeException ex) {
                taken = false;
            }
            if (!taken) {
                return;
            }
            pending.pollFirst();
            if (p.summary) {
                pendingSummaries--;
            }
        }
    }

    /** A record waiting for the sink, in its wire bytes. */
    private static final class Pending {
        final String key;
        final byte[] value;
        final boolean summary;
        /** A summary's {@code dropped}. */
        final long dropped;

        Pending(String key, byte[] value, boolean summary, long dropped) {
            this.key = key;
            this.value = value;
            this.summary = summary;
            this.dropped = dropped;
        }

        @Override
        public String toString() {
            return new String(value, StandardCharsets.US_ASCII);
        }
    }

    /** A summary's key: ("send", topic, broker, mode) or ("consume", group, topic). */
    private static final class WindowKey {
        static final String SEND = "send";
        static final String CONSUME = "consume";
        final String kind;
        final String a;
        final String b;
        final String c;
        private final int hash;

        WindowKey(String kind, String a, String b, String c) {
            this.kind = kind;
            this.a = a;
            this.b = b;
            this.c = c;
            this.hash = Objects.hash(kind, a, b, c);
        }

        @Override
        public boolean equals(Object o) {
            if (!(o instanceof WindowKey)) {
                return false;
            }
            WindowKey k = (WindowKey) o;
            return hash == k.hash && kind.equals(k.kind) && Objects.equals(a, k.a) && Objects.equals(b, k.b)
                    && Objects.equals(c, k.c);
        }

        @Override
        public int hashCode() {
            return hash;
        }
    }

    /** An open summary: a {@code send_summary} or a {@code consume_summary}. */
    private static final class Window {
        final WindowKey key;
        long windowStart;
        long windowEnd;
        long messages;
        String eventId;
        long eventTime;
        // send summaries only
        long firstTime;
        long firstLatencyMs;
        String firstEventId;
        long latencyTotal;
        long latencyMax;
        long latencyMs;
        long[] histogram;
        Long queueIndexStart;
        Long queueIndexEnd;

        Window(WindowKey key) {
            this.key = key;
        }

        TreeMap<String, Object> record(Reporter r) {
            TreeMap<String, Object> s = WireJson.record();
            if (WindowKey.CONSUME.equals(key.kind)) {
                s.put("cluster", r.cluster);
                s.put("kind", "consume_summary");
                s.put("consumer_group", key.a);
                s.put("topic", key.b);
            } else {
                r.putBase(s);
                s.put("kind", "send_summary");
                s.put("topic", key.a);
                s.put("broker_name", key.b);
                s.put("mode", key.c);
                s.put("outcome", "SEND_OK");
                s.put("first_time", firstTime);
                s.put("first_latency_ms", firstLatencyMs);
                s.put("first_event_id", firstEventId);
                s.put("latency_total", latencyTotal);
                s.put("latency_max", latencyMax);
                s.put("latency_ms", latencyMs);
                s.put("histogram", histogram);
                SendEvent.putIf(s, "queue_index_start", queueIndexStart);
                SendEvent.putIf(s, "queue_index_end", queueIndexEnd);
            }
            s.put("messages", messages);
            s.put("window_start", windowStart);
            s.put("window_end", windowEnd);
            s.put("event_id", eventId);
            s.put("event_time", eventTime);
            return s;
        }
    }
}
