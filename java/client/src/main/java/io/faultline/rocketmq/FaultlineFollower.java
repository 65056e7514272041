package io.faultline.rocketmq;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Follows faultline's decisions in RocketMQ producers: reads the compacted decisions topic from
 * its start (its latest message per broker, then each new one) in a daemon thread, and holds the
 * brokers the cluster's decisions isolate in each followed producer's own fault table, so that a
 * producer with {@code sendLatencyFaultEnable} selects around them, and has them back when
 * faultline restores them or the decision runs out.
 *
 * <pre>
 * FaultlineFollower follower = FaultlineFollower.builder("kafka:9092")
 *     .cluster("DefaultCluster").build().start();
 * producer.setSendLatencyFaultEnable(true);
 * follower.follow(producer);      // any time, before or after producer.start()
 * ...
 * follower.close();               // the producer's table is its own again
 * </pre>
 *
 * <p><b>Own + faultline.</b> The producer keeps its own strategy: its table still takes every
 * send's latency, and faultline only adds. A broker faultline holds is held until the decision's
 * end, and held again every {@link Builder#applyIntervalMs} if the producer's own update cut it
 * short (RocketMQ 4.x overwrites an item with each answer); an item the producer made longer than
 * faultline's is left alone, and so is, when faultline lets the broker go, an item the producer
 * changed meanwhile. Only an item still as faultline wrote it is made available at once.
 *
 * <p><b>Never in the way.</b> Nothing runs on the send path: the producer's selection reads its
 * table as it always does. Kafka is read by a thread of its own that waits for a Kafka that is
 * down or absent and tries again; the application never gets an exception or a pause from it. A
 * decision not heard of again keeps its broker only until its end ({@link BrokerDecision#heldUntil()}),
 * so without Kafka a producer is, within the longest decision it read, as it would be without
 * faultline.
 *
 * <p>Thread-safe; every method but the builder's returns without throwing.
 */
public final class FaultlineFollower implements AutoCloseable {
    public static final String DEFAULT_TOPIC = "faultline.decisions";
    /** RocketMQ's default {@code brokerClusterName}. */
    public static final String DEFAULT_CLUSTER = "DefaultCluster";

    private static final Logger log = LoggerFactory.getLogger(FaultlineFollower.class);
    private static final AtomicLong INSTANCES = new AtomicLong();

    private final String bootstrapServers;
    private final String topic;
    private final String cluster;
    private final Map<String, Object> kafkaProperties;
    private final long applyIntervalMs;
    private final long probePeriodMs;
    private final long pollMs;
    private final long retryMs;
    private final DecisionView view;
    private final Listener listener;
    private final CopyOnWriteArrayList<Followed> followed = new CopyOnWriteArrayList<>();
    private final AtomicBoolean started = new AtomicBoolean();
    private final AtomicBoolean closed = new AtomicBoolean();
    private final AtomicLong messages = new AtomicLong();
    private final AtomicLong decisionsRead = new AtomicLong();
    private final AtomicLong writes = new AtomicLong();
    private final AtomicLong releases = new AtomicLong();
    private final String name;
    private volatile boolean caughtUp;
    private volatile long lastReadAt;
    private volatile String lastError;
    private volatile KafkaConsumer<String, String> consumer;
    private Thread reader;
    private ScheduledExecutorService applier;

    /** A follower's settings; {@link #build()} makes it, {@link FaultlineFollower#start()} starts it. */
    public static final class Builder {
        private final String bootstrapServers;
        private String topic = DEFAULT_TOPIC;
        private String cluster = DEFAULT_CLUSTER;
        private final Map<String, Object> kafka = new LinkedHashMap<>();
        private long applyIntervalMs = 50;
        private long probePeriodMs = 1_000;
        private long outOfRouteHoldMs = 30_000;
        private long maxHoldMs = 600_000;
        private long pollMs = 200;
        private long retryMs = 2_000;
        private Listener listener;

        private Builder(String bootstrapServers) {
            if (bootstrapServers == null || bootstrapServers.trim().isEmpty()) {
                throw new IllegalArgumentException("faultline: the Kafka bootstrap servers are required");
            }
            this.bootstrapServers = bootstrapServers.trim();
        }

        /** The decisions topic (default {@value FaultlineFollower#DEFAULT_TOPIC}, the job's {@code decisions_topic}). */
        public Builder topic(String topic) {
            this.topic = Objects.requireNonNull(topic, "topic");
            return this;
        }

        /** The producers' RocketMQ cluster, as faultline names it (default {@value FaultlineFollower#DEFAULT_CLUSTER}). */
        public Builder cluster(String cluster) {
            this.cluster = Objects.requireNonNull(cluster, "cluster");
            return this;
        }

        /** A Kafka consumer setting (SASL, SSL, timeouts), over the follower's own. */
        public Builder kafkaProperty(String key, Object value) {
            kafka.put(key, value);
            return this;
        }

        public Builder kafkaProperties(Map<String, ?> properties) {
            if (properties != null) {
                kafka.putAll(properties);
            }
            return this;
        }

        /** How often the producers' tables are brought in line with the decisions (default 50 ms). */
        public Builder applyIntervalMs(long ms) {
            this.applyIntervalMs = positive(ms, "applyIntervalMs");
            return this;
        }

        /**
         * A probation's period (default 1 s): the broker is open for its share of each period and
         * held for the rest, so it takes about that share of the sends.
         */
        public Builder probePeriodMs(long ms) {
            this.probePeriodMs = positive(ms, "probePeriodMs");
            return this;
        }

        /**
         * How long a broker the NameServer dropped ({@code OUT_OF_ROUTE}) is kept away, from when
         * it was dropped (default 30 s, a producer's route poll: then its own route knows).
         */
        public Builder outOfRouteHoldMs(long ms) {
            this.outOfRouteHoldMs = positive(ms, "outOfRouteHoldMs");
            return this;
        }

        /** The longest any decision keeps a broker away from when it was read (default 10 min). */
        public Builder maxHoldMs(long ms) {
            this.maxHoldMs = positive(ms, "maxHoldMs");
            return this;
        }

        /** The Kafka consumer's poll (default 200 ms). */
        public Builder pollMs(long ms) {
            this.pollMs = positive(ms, "pollMs");
            return this;
        }

        /** The pause before trying Kafka again after a failure (default 2 s). */
        public Builder retryMs(long ms) {
            this.retryMs = positive(ms, "retryMs");
            return this;
        }

        /**
         * Told of every write the follower makes into a followed producer's fault table (for
         * metrics and measurements: when a decision took effect in a producer); called on the
         * follower's own thread, so it should return at once. What it throws is logged and ignored.
         */
        public Builder listener(Listener listener) {
            this.listener = listener;
            return this;
        }

        public FaultlineFollower build() {
            return new FaultlineFollower(this);
        }

        private static long positive(long ms, String what) {
            if (ms <= 0) {
                throw new IllegalArgumentException("faultline: " + what + " must be positive, not " + ms);
            }
            return ms;
        }
    }

    /** What a follower has done so far. */
    public static final class Status {
        public final long messagesRead;
        public final long decisionsRead;
        public final long skipped;
        public final boolean caughtUp;
        public final long lastReadAt;
        public final String lastError;
        public final int producers;
        public final long holdsWritten;
        public final long holdsReleased;

        Status(long messagesRead, long decisionsRead, long skipped, boolean caughtUp, long lastReadAt,
               String lastError, int producers, long holdsWritten, long holdsReleased) {
            this.messagesRead = messagesRead;
            this.decisionsRead = decisionsRead;
            this.skipped = skipped;
            this.caughtUp = caughtUp;
            this.lastReadAt = lastReadAt;
            this.lastError = lastError;
            this.producers = producers;
            this.holdsWritten = holdsWritten;
            this.holdsReleased = holdsReleased;
        }

        @Override
        public String toString() {
            return "messages " + messagesRead + ", decisions " + decisionsRead + ", skipped " + skipped
                + (caughtUp ? ", caught up" : ", catching up") + ", producers " + producers
                + ", holds written " + holdsWritten + ", released " + holdsReleased
                + (lastError == null ? "" : ", last error: " + lastError);
        }
    }

    /** What the follower wrote into a producer's fault table ({@link Builder#listener}). */
    public interface Listener {
        /**
         * The follower held {@code broker} in {@code producer}'s table until {@code heldUntil}, or
         * let go of its hold ({@code heldUntil <= at}: the broker available at once, or the
         * producer's own item kept), at {@code at} (the follower's clock, epoch ms). A hold written
         * again after the producer's own update cut it short is told again.
         *
         * @param decision the decision the write follows; null when none is known any more
         *     (a tombstone, or the follower's {@link #close})
         */
        void applied(DefaultMQProducer producer, String broker, BrokerDecision decision, long heldUntil, long at);
    }

    public static Builder builder(String bootstrapServers) {
        return new Builder(bootstrapServers);
    }

    private FaultlineFollower(Builder b) {
        this.bootstrapServers = b.bootstrapServers;
        this.topic = b.topic;
        this.cluster = b.cluster;
        this.kafkaProperties = Collections.unmodifiableMap(new LinkedHashMap<>(b.kafka));
        this.applyIntervalMs = b.applyIntervalMs;
        this.probePeriodMs = b.probePeriodMs;
        this.pollMs = b.pollMs;
        this.retryMs = b.retryMs;
        this.view = new DecisionView(b.outOfRouteHoldMs, b.maxHoldMs);
        this.listener = b.listener;
        this.name = "faultline-follower-" + INSTANCES.incrementAndGet();
    }

    /** Start reading and applying (once; later calls do nothing). Returns at once. */
    public FaultlineFollower start() {
        if (closed.get() || !started.compareAndSet(false, true)) {
            return this;
        }
        applier = Executors.newSingleThreadScheduledExecutor(r -> daemon(r, name + "-apply"));
        applier.scheduleWithFixedDelay(this::applyAll, 0, applyIntervalMs, TimeUnit.MILLISECONDS);
        reader = daemon(this::read, name + "-kafka");
        reader.start();
        log.info("faultline: following {} on {} for cluster {}", topic, bootstrapServers, cluster);
        return this;
    }

    /**
     * Follow faultline in {@code producer}'s own fault table (any time, before or after its
     * start). Returns false, and changes nothing, when its table cannot be reached (a client that
     * is not RocketMQ's {@code rocketmq-client}). Without {@code sendLatencyFaultEnable} the
     * producer does not read its table: the holds are written, and change nothing until it is on.
     */
    public synchronized boolean follow(DefaultMQProducer producer) {
        if (producer == null || closed.get()) {
            return false;
        }
        for (Followed f : followed) {
            if (f.table.producer() == producer) {
                return true;
            }
        }
        try {
            Followed f = new Followed(new ProducerFaultTable(producer));
            followed.add(f);
            if (!producer.isSendLatencyFaultEnable()) {
                log.warn("faultline: producer {} has sendLatencyFaultEnable off: its selection ignores its "
                    + "fault table, and so faultline's decisions", producer.getProducerGroup());
            }
            wake();
            return true;
        } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
            log.warn("faultline: cannot reach the fault table of producer {}: {}", producer.getProducerGroup(), e.toString());
            return false;
        }
    }

    /** Stop following in {@code producer}: what faultline holds there is let go. */
    public boolean unfollow(DefaultMQProducer producer) {
        for (Followed f : followed) {
            if (f.table.producer() == producer) {
                followed.remove(f);
                f.releaseAll(System.currentTimeMillis());
                return true;
            }
        }
        return false;
    }

    /** Whether faultline lets {@code broker} of the follower's cluster take a send now. */
    public boolean isAvailable(String broker) {
        return isAvailable(cluster, broker);
    }

    /** Whether faultline lets {@code broker} of {@code cluster} take a send now (on probation, per call). */
    public boolean isAvailable(String cluster, String broker) {
        return view.isAvailable(cluster, broker, System.currentTimeMillis());
    }

    /** As {@link #isAvailable(String, String)}; on probation {@code ticket} decides (a counter per send). */
    public boolean isAvailable(String cluster, String broker, long ticket) {
        return view.isAvailable(cluster, broker, System.currentTimeMillis(), ticket);
    }

    /** The latest decision about each broker of the follower's cluster, by broker name (immutable). */
    public Map<String, BrokerDecision> decisions() {
        return view.decisions(cluster);
    }

    public Map<String, BrokerDecision> decisions(String cluster) {
        return view.decisions(cluster);
    }

    /** The latest decision about each broker's place in the route (out of it, back), by broker name. */
    public Map<String, BrokerDecision> routes() {
        return view.routes(cluster);
    }

    /** The brokers faultline keeps away from the follower's cluster now, wholly or in part. */
    public Set<String> held() {
        long now = System.currentTimeMillis();
        Set<String> out = new TreeSet<>();
        for (Map<String, BrokerDecision> m : Arrays.asList(decisions(), routes())) {
            for (BrokerDecision d : m.values()) {
                if (d.holds(now)) {
                    out.add(d.broker());
                }
            }
        }
        return Collections.unmodifiableSet(out);
    }

    public String cluster() {
        return cluster;
    }

    public String topic() {
        return topic;
    }

    public Status status() {
        return new Status(messages.get(), decisionsRead.get(), view.skipped(), caughtUp, lastReadAt, lastError,
            followed.size(), writes.get(), releases.get());
    }

    /** Stop reading, and let go of every hold faultline has in the followed producers. */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        KafkaConsumer<String, String> c = consumer;
        if (c != null) {
            c.wakeup();
        }
        if (applier != null) {
            applier.shutdown();
            try {
                applier.awaitTermination(5, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        if (reader != null) {
            try {
                reader.join(5_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        long now = System.currentTimeMillis();
        for (Followed f : followed) {
            f.releaseAll(now);
        }
        followed.clear();
    }

    // -- reading ----------------------------------------------------------------------------------

    private Map<String, Object> consumerConfig() {
        Map<String, Object> c = new HashMap<>();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers);
        c.put(ConsumerConfig.CLIENT_ID_CONFIG, name);
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // never create the topic (the job creates it compacted)
        c.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, false);
        // a Kafka that is down is asked again every 5 s at most, not every second (each failed
        // connection is a warning in the application's log)
        c.put(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 5_000);
        c.putAll(kafkaProperties);
        return c;
    }

    private void read() {
        while (!closed.get()) {
            KafkaConsumer<String, String> c = null;
            try {
                c = new KafkaConsumer<>(consumerConfig(), new StringDeserializer(), new StringDeserializer());
                consumer = c;
                if (closed.get()) {
                    break;
                }
                consume(c);
            } catch (WakeupException | InterruptException e) {
                if (!closed.get()) {
                    failed(e);
                }
            } catch (Throwable e) {
                failed(e);
            } finally {
                consumer = null;
                if (c != null) {
                    try {
                        c.close(Duration.ofMillis(500));
                    } catch (Throwable e) {
                        // closing is best effort
                    }
                }
            }
            pause(retryMs);
        }
    }

    /** Assign every partition from its start, then poll until closed. */
    private void consume(KafkaConsumer<String, String> c) {
        List<PartitionInfo> infos = null;
        while (!closed.get() && (infos == null || infos.isEmpty())) {
            infos = c.partitionsFor(topic, Duration.ofMillis(10_000));
            if (infos == null || infos.isEmpty()) {
                note("the topic " + topic + " does not exist (yet)");
                pause(retryMs);
            }
        }
        if (closed.get()) {
            return;
        }
        List<TopicPartition> parts = new ArrayList<>();
        for (PartitionInfo p : infos) {
            parts.add(new TopicPartition(p.topic(), p.partition()));
        }
        c.assign(parts);
        c.seekToBeginning(parts);
        // what was there at the start is the topic's state, read as such; the rest is news
        Map<TopicPartition, Long> behind = new HashMap<>();
        for (Map.Entry<TopicPartition, Long> e : c.endOffsets(parts, Duration.ofMillis(10_000)).entrySet()) {
            if (e.getValue() != null && e.getValue() > 0) {
                behind.put(e.getKey(), e.getValue());
            }
        }
        Map<TopicPartition, Long> end = new HashMap<>(behind);
        caughtUp = behind.isEmpty();
        if (lastError != null) {
            log.info("faultline: reading {} again", topic);
            lastError = null;
        }
        while (!closed.get()) {
            ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(pollMs));
            long now = System.currentTimeMillis();
            boolean any = false;
            for (ConsumerRecord<String, String> r : records) {
                Long e = end.get(new TopicPartition(r.topic(), r.partition()));
                boolean live = e == null || r.offset() >= e;
                messages.incrementAndGet();
                if (view.apply(r.key(), r.value(), now, live) != null) {
                    decisionsRead.incrementAndGet();
                    any = true;
                }
            }
            if (!records.isEmpty()) {
                lastReadAt = now;
            }
            if (!behind.isEmpty()) {
                behind.entrySet().removeIf(e -> position(c, e.getKey()) >= e.getValue());
                if (behind.isEmpty()) {
                    caughtUp = true;
                    log.info("faultline: caught up with {}: {} decisions about {}", topic, decisionsRead.get(),
                        view.decisions(cluster).keySet());
                }
            }
            if (any) {
                wake();
            }
        }
    }

    private long position(KafkaConsumer<String, String> c, TopicPartition tp) {
        try {
            return c.position(tp, Duration.ofMillis(pollMs));
        } catch (RuntimeException e) {
            return -1;
        }
    }

    private void failed(Throwable e) {
        String said = e.getClass().getSimpleName() + (e.getMessage() == null ? "" : ": " + e.getMessage());
        if (!said.equals(lastError)) {
            log.warn("faultline: reading {} from {} failed, trying again every {} ms: {}", topic, bootstrapServers,
                retryMs, said);
        }
        lastError = said;
    }

    private void note(String what) {
        if (!what.equals(lastError)) {
            log.warn("faultline: {}; trying again every {} ms", what, retryMs);
        }
        lastError = what;
    }

    private void pause(long ms) {
        if (closed.get()) {
            return;
        }
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            closed.set(true);
        }
    }

    // -- applying -----------------------------------------------------------------------------

    private void wake() {
        ScheduledExecutorService a = applier;
        if (a != null && !closed.get()) {
            try {
                a.execute(this::applyAll);
            } catch (RejectedExecutionException e) {
                // closing
            }
        }
    }

    private void applyAll() {
        if (closed.get()) {
            return;
        }
        long now = System.currentTimeMillis();
        long next = applyAt(now);
        ScheduledExecutorService a = applier;
        if (next - now < applyIntervalMs && a != null) {  // a probation closes before the next round
            try {
                a.schedule(this::applyAll, Math.max(0, next + 1 - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
            } catch (RejectedExecutionException e) {
                // closing
            }
        }
    }

    /**
     * Bring every followed producer's table in line with the decisions at {@code now}; returns
     * when a probation closes next ({@code Long.MAX_VALUE}: none).
     */
    long applyAt(long now) {
        Map<String, BrokerDecision> mine = view.decisions(cluster);
        Set<String> brokers = new TreeSet<>(mine.keySet());
        brokers.addAll(view.routes(cluster).keySet());
        for (Followed f : followed) {
            f.apply(brokers, now);
        }
        long next = Long.MAX_VALUE;
        for (BrokerDecision d : mine.values()) {
            next = Math.min(next, d.nextClosing(now, probePeriodMs));
        }
        return next;
    }

    /** What {@code Followed.apply} returns when it wrote nothing. */
    private static final long NOTHING = Long.MIN_VALUE;

    /** One followed producer, and what faultline wrote into its table. */
    private final class Followed {
        final ProducerFaultTable table;
        /** Per broker, the item's start as faultline last wrote it. */
        final Map<String, Long> written = new HashMap<>();
        private String lastFailure;

        Followed(ProducerFaultTable table) {
            this.table = table;
        }

        synchronized void apply(Set<String> decided, long now) {
            Set<String> brokers = new TreeSet<>(decided);
            brokers.addAll(written.keySet());
            for (String broker : brokers) {
                try {
                    long until = apply(broker, view.blockedUntil(cluster, broker, now, probePeriodMs), now);
                    if (until != NOTHING) {
                        tell(broker, view.deciding(cluster, broker, now, probePeriodMs), until, now);
                    }
                } catch (Throwable e) {
                    String said = e.toString();
                    if (!said.equals(lastFailure)) {
                        log.warn("faultline: cannot apply a decision about {} to producer {}: {}", broker,
                            table.producer().getProducerGroup(), said);
                        lastFailure = said;
                    }
                }
            }
        }

        /**
         * Hold {@code broker} until {@code target} (let go of faultline's hold when it is not
         * after {@code now}); returns the item's new start when the follower wrote or let go of
         * something, {@link #NOTHING} when it left the table as it was.
         */
        private long apply(String broker, long target, long now) throws ReflectiveOperationException {
            long start = table.availableFrom(broker);
            Long w = written.get(broker);
            if (target > now) {
                if (w != null && start == w) {
                    if (start != target) {  // as faultline left it: exactly the new end
                        table.setAvailableFrom(broker, target);
                        written.put(broker, target);
                        writes.incrementAndGet();
                        return target;
                    }
                } else if (start < target) {  // none, or the producer's own, shorter
                    long held = table.isolate(broker, target);
                    written.put(broker, held);
                    writes.incrementAndGet();
                    return held;
                } else if (w != null) {  // the producer's own hold is as long or longer: its own
                    written.remove(broker);
                    return now;
                }
            } else if (w != null) {
                written.remove(broker);
                if (start == w && start > now) {
                    table.setAvailableFrom(broker, now);
                    releases.incrementAndGet();
                }
                return now;
            }
            return NOTHING;
        }

        private void tell(String broker, BrokerDecision decision, long until, long now) {
            Listener l = listener;
            if (l == null) {
                return;
            }
            try {
                l.applied(table.producer(), broker, decision, until, now);
            } catch (Throwable e) {
                log.warn("faultline: the follower's listener failed: {}", e.toString());
            }
        }

        synchronized void releaseAll(long now) {
            for (String broker : new ArrayList<>(written.keySet())) {
                try {
                    if (apply(broker, 0, now) != NOTHING) {
                        tell(broker, null, now, now);
                    }
                } catch (Throwable e) {
                    written.remove(broker);
                }
            }
        }
    }

    private static Thread daemon(Runnable r, String name) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        return t;
    }

    /** The decisions read, for tests. */
    DecisionView view() {
        return view;
    }

    /** The followed producers (their identity), for tests and diagnostics. */
    Set<DefaultMQProducer> producers() {
        Set<DefaultMQProducer> out = Collections.newSetFromMap(new IdentityHashMap<>());
        for (Followed f : followed) {
            out.add(f.table.producer());
        }
        return out;
    }
}
