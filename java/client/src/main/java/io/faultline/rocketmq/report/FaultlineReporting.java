package io.faultline.rocketmq.report;

import java.io.Closeable;
import java.lang.reflect.Method;
import java.time.Duration;
import java.util.Collection;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.LongSupplier;
import java.util.function.Supplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.MQVersion;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * faultline's reporting installed in a RocketMQ producer (or push consumer): a
 * {@link FaultlineSendHook} (a {@link FaultlineConsumeHook}) registered with the client, a
 * {@link SharedReporter} with the rule of docs/producers/summaries.md, a {@link KafkaSink} to the
 * send-results topic, and
 * a timer thread that closes the windows that ended (every {@code flushIntervalMs}, 1 s) and
 * reports the call timeouts the hook cannot see.
 *
 * <pre>{@code
 * DefaultMQProducer producer = new DefaultMQProducer("pg-orders");
 * producer.setSendLatencyFaultEnable(true);
 * FaultlineReporting reporting = FaultlineReporting.install(producer,
 *         new FaultlineReporting.Settings().bootstrapServers("kafka:9092").cluster("DefaultCluster"));
 * producer.start();
 * ...
 * reporting.close();   // before producer.shutdown(): every open summary goes out
 * producer.shutdown();
 * }</pre>
 *
 * <p>Install before the client starts (RocketMQ's hook list is not safe to change during sends).
 * The reporter is made at the first send, when the client's id ({@code clientId}, the reporter's
 * {@code producer_id}) is settled; the client profile comes from the RocketMQ client on the
 * classpath ({@link #detectProfile}) unless the settings name one, {@code latency_fault_enable}
 * from the producer's {@code sendLatencyFaultEnable} then.
 */
public final class FaultlineReporting implements Closeable {
    private static final Logger log = LoggerFactory.getLogger(FaultlineReporting.class);
    private static final AtomicInteger THREADS = new AtomicInteger();
    private static final Pattern VERSION = Pattern.compile("V(\\d+)_(\\d+)_(\\d+)");

    /** What {@code install} needs; the defaults are those of docs/producers/java.md. */
    public static final class Settings {
        private String bootstrapServers;
        private String topic = "faultline.events";
        private final Map<String, Object> kafka = new LinkedHashMap<String, Object>();
        private String cluster = "default";
        private String producerId;
        private String clientProfile;
        private long windowMs = Reporter.WINDOW_MS;
        private int buffer = Reporter.BUFFER;
        private long flushIntervalMs = 1000;
        private long callTimeoutGraceMs = 1000;
        private long closeTimeoutMs = 10_000;
        LongSupplier clock = SystemClock.INSTANCE;

        /** Kafka's bootstrap servers (needed unless a sink is given to {@code install}). */
        public Settings bootstrapServers(String bootstrapServers) {
            this.bootstrapServers = bootstrapServers;
            return this;
        }

        /** The send-results topic faultline's job reads (default {@code faultline.events}). */
        public Settings topic(String topic) {
            this.topic = topic;
            return this;
        }

        /** A Kafka producer setting (security, acks, ...); {@code max.block.ms} stays 0. */
        public Settings kafka(String name, Object value) {
            this.kafka.put(name, value);
            return this;
        }

        /** Kafka producer settings. */
        public Settings kafka(Map<String, ?> settings) {
            this.kafka.putAll(settings);
            return this;
        }

        /** The RocketMQ cluster, as faultline names it (default {@code default}). */
        public Settings cluster(String cluster) {
            this.cluster = cluster;
            return this;
        }

        /** The producer's id in the records (default: the client's {@code clientId} at its first send). */
        public Settings producerId(String producerId) {
            this.producerId = producerId;
            return this;
        }

        /** {@code rocketmq-4.7}, {@code rocketmq-4.9} or {@code rocketmq-5} (default: {@link #detectProfile}). */
        public Settings clientProfile(String clientProfile) {
            Profile.named(clientProfile);
            this.clientProfile = clientProfile;
            return this;
        }

        /** A summary's window (default 10 s: the job's outlier window must be a multiple). */
        public Settings windowMs(long windowMs) {
            this.windowMs = windowMs;
            return this;
        }

        /** Records held while Kafka cannot take them (default 10,000). */
        public Settings buffer(int buffer) {
            this.buffer = buffer;
            return this;
        }

        /** How often the timer closes windows and offers the buffer to Kafka (default 1000 ms). */
        public Settings flushIntervalMs(long flushIntervalMs) {
            this.flushIntervalMs = flushIntervalMs;
            return this;
        }

        /** How long after a failed SYNC attempt its retry must start before a CALL_TIMEOUT is
         * reported (default 1000 ms). */
        public Settings callTimeoutGraceMs(long callTimeoutGraceMs) {
            this.callTimeoutGraceMs = callTimeoutGraceMs;
            return this;
        }

        /** How long {@link FaultlineReporting#close} waits for Kafka to take the last records (default 10 s). */
        public Settings closeTimeoutMs(long closeTimeoutMs) {
            this.closeTimeoutMs = closeTimeoutMs;
            return this;
        }
    }

    private final SharedReporter reporter;
    private final FaultlineSendHook sendHook;
    private final FaultlineConsumeHook consumeHook;
    private final KafkaSink ownSink;
    private final long closeTimeoutMs;
    private final ScheduledExecutorService timer;

    private FaultlineReporting(SharedReporter reporter, FaultlineSendHook sendHook, FaultlineConsumeHook consumeHook,
                               KafkaSink ownSink, Settings settings) {
        this.reporter = reporter;
        this.sendHook = sendHook;
        this.consumeHook = consumeHook;
        this.ownSink = ownSink;
        this.closeTimeoutMs = settings.closeTimeoutMs;
        this.timer = Executors.newSingleThreadScheduledExecutor(new ThreadFactory() {
            @Override
            public Thread newThread(Runnable r) {
                Thread t = new Thread(r, "faultline-reporter-" + THREADS.incrementAndGet());
                t.setDaemon(true);
                return t;
            }
        });
        long every = Math.max(1, settings.flushIntervalMs);
        timer.scheduleWithFixedDelay(new Runnable() {
            @Override
            public void run() {
                tick();
            }
        }, every, every, TimeUnit.MILLISECONDS);
    }

    /** Report this producer's sends to Kafka ({@code settings.bootstrapServers}). */
    public static FaultlineReporting install(DefaultMQProducer producer, Settings settings) {
        KafkaSink sink = kafkaSink(settings);
        return install(producer, settings, sink, sink);
    }

    /** Report this producer's sends to {@code sink} (shared by several producers, or a test's);
     * closing the reporting does not close the sink. */
    public static FaultlineReporting install(DefaultMQProducer producer, Settings settings, Sink sink) {
        return install(producer, settings, sink, null);
    }

    /** Report this push consumer's consumes to Kafka. */
    public static FaultlineReporting install(DefaultMQPushConsumer consumer, Settings settings) {
        KafkaSink sink = kafkaSink(settings);
        return install(consumer, settings, sink, sink);
    }

    /** Report this push consumer's consumes to {@code sink}. */
    public static FaultlineReporting install(DefaultMQPushConsumer consumer, Settings settings, Sink sink) {
        return install(consumer, settings, sink, null);
    }

    private static KafkaSink kafkaSink(Settings settings) {
        if (settings.bootstrapServers == null) {
            throw new IllegalArgumentException("faultline reporting needs Kafka's bootstrap servers");
        }
        return new KafkaSink(settings.bootstrapServers, settings.topic, settings.kafka);
    }

    private static FaultlineReporting install(final DefaultMQProducer producer, final Settings settings,
                                              final Sink sink, KafkaSink own) {
        final String profileName = settings.clientProfile != null ? settings.clientProfile : detectProfile();
        Profile profile = Profile.named(profileName);
        Set<Integer> codes = retryResponseCodes(producer);
        if (codes != null) {
            profile = profile.withRetryResponseCodes(codes);
        }
        SharedReporter shared = new SharedReporter(new Supplier<Reporter>() {
            @Override
            public Reporter get() {
                return Reporter.builder(settings.producerId != null ? settings.producerId : producer.buildMQClientId())
                        .cluster(settings.cluster)
                        .producerGroup(producer.getProducerGroup())
                        .clientProfile(profileName)
                        .latencyFaultEnable(producer.isSendLatencyFaultEnable())
                        .windowMs(settings.windowMs)
                        .buffer(settings.buffer)
                        .build(sink);
            }
        }, settings.clock);
        FaultlineSendHook hook = new FaultlineSendHook(shared, producer, profile, settings.clock,
                settings.callTimeoutGraceMs);
        producer.getDefaultMQProducerImpl().registerSendMessageHook(hook);
        log.info("faultline: reporting the sends of producer group {} as {} (cluster {})", producer.getProducerGroup(),
                profileName, settings.cluster);
        return new FaultlineReporting(shared, hook, null, own, settings);
    }

    private static FaultlineReporting install(final DefaultMQPushConsumer consumer, final Settings settings,
                                              final Sink sink, KafkaSink own) {
        final String profileName = settings.clientProfile != null ? settings.clientProfile : detectProfile();
        SharedReporter shared = new SharedReporter(new Supplier<Reporter>() {
            @Override
            public Reporter get() {
                return Reporter.builder(settings.producerId != null ? settings.producerId : consumer.buildMQClientId())
                        .cluster(settings.cluster)
                        .clientProfile(profileName)
                        .windowMs(settings.windowMs)
                        .buffer(settings.buffer)
                        .build(sink);
            }
        }, settings.clock);
        FaultlineConsumeHook hook = new FaultlineConsumeHook(shared);
        consumer.getDefaultMQPushConsumerImpl().registerConsumeMessageHook(hook);
        log.info("faultline: reporting the consumes of group {} (cluster {})", consumer.getConsumerGroup(),
                settings.cluster);
        return new FaultlineReporting(shared, null, hook, own, settings);
    }

    /**
     * The client profile of the RocketMQ client on the classpath, from its
     * {@code MQVersion.CURRENT_VERSION} (read at run time: the constant is compiled into callers):
     * 5.x is {@code rocketmq-5}; 4.9.4 and later 4.x {@code rocketmq-4.9}; older 4.x
     * {@code rocketmq-4.7} (before 4.9.4 {@code pickOneAtLeast} shuffles, as 4.7.1 does).
     */
    public static String detectProfile() {
        try {
            int version = MQVersion.class.getField("CURRENT_VERSION").getInt(null);
            return profileOf(MQVersion.getVersionDesc(version));
        } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
            log.warn("faultline: cannot read the RocketMQ client's version ({}); assuming rocketmq-4.9", e.toString());
            return "rocketmq-4.9";
        }
    }

    /** The profile of a version as {@code MQVersion.getVersionDesc} names it ({@code V4_9_7}). */
    static String profileOf(String versionDesc) {
        Matcher m = VERSION.matcher(String.valueOf(versionDesc));
        if (!m.find()) {
            throw new IllegalArgumentException("not a RocketMQ version: " + versionDesc);
        }
        int major = Integer.parseInt(m.group(1));
        int minor = Integer.parseInt(m.group(2));
        int patch = Integer.parseInt(m.group(3));
        if (major >= 5) {
            return "rocketmq-5";
        }
        if (major == 4 && (minor > 9 || (minor == 9 && patch >= 4))) {
            return "rocketmq-4.9";
        }
        return "rocketmq-4.7";
    }

    /** {@code DefaultMQProducer.getRetryResponseCodes()} (4.9.2 and later), or null without it. */
    @SuppressWarnings("unchecked")
    static Set<Integer> retryResponseCodes(DefaultMQProducer producer) {
        try {
            Method m = producer.getClass().getMethod("getRetryResponseCodes");
            Object codes = m.invoke(producer);
            return codes instanceof Collection ? new HashSet<Integer>((Collection<Integer>) codes) : null;
        } catch (NoSuchMethodException e) {
            return null;
        } catch (ReflectiveOperationException | RuntimeException e) {
            log.warn("faultline: cannot read the producer's retry response codes ({}); using the profile's",
                    e.toString());
            return null;
        }
    }

    private void tick() {
        try {
            if (sendHook != null) {
                sendHook.sweep();
            }
            reporter.flush();
        } catch (RuntimeException | LinkageError e) {
            log.warn("faultline: the reporter's timer failed (it goes on)", e);
        }
    }

    /** The reporter the hook feeds. */
    public SharedReporter reporter() {
        return reporter;
    }

    /** The producer's hook (null for a consumer). */
    public FaultlineSendHook sendHook() {
        return sendHook;
    }

    /** The consumer's hook (null for a producer). */
    public FaultlineConsumeHook consumeHook() {
        return consumeHook;
    }

    /** The Kafka sink this installation made (null when a sink was given). */
    public KafkaSink kafkaSink() {
        return ownSink;
    }

    /** Close the windows that ended and report the call timeouts due, now (what the timer does). */
    public void flush() {
        tick();
    }

    /**
     * Stop reporting: the hook ignores what follows, every open summary goes out, and (with its own
     * Kafka sink) waits up to {@code closeTimeoutMs} for Kafka to take the buffer, then closes the
     * Kafka producer. Call it before the client's {@code shutdown()}.
     */
    @Override
    public void close() {
        timer.shutdownNow();
        if (sendHook != null) {
            sendHook.sweep();
            sendHook.close();
        }
        if (consumeHook != null) {
            consumeHook.close();
        }
        if (ownSink != null) {
            KafkaReporter.closeAndWait(reporter, ownSink, Duration.ofMillis(closeTimeoutMs));
        } else {
            reporter.close();
        }
    }
}
