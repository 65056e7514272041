package io.faultline.rocketmq.harness;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.StringWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import io.faultline.rocketmq.BrokerDecision;
import io.faultline.rocketmq.FaultlineFollower;
import org.apache.rocketmq.client.hook.SendMessageContext;
import org.apache.rocketmq.client.hook.SendMessageHook;
import org.apache.rocketmq.client.producer.DefaultMQProducer;

/**
 * The closed-loop bench's record of what the harness's producers did (streaming/bench/closed_loop.py
 * reads it): one JSON object a line, appended to one file, of these kinds ({@code k}):
 *
 * <ul>
 * <li>{@code send}: what the application saw of one {@code send}: {@code id}, {@code start},
 *     {@code end} (epoch ms), {@code us} (its time, µs), {@code broker} (null when it failed),
 *     {@code ok}, {@code error};
 * <li>{@code attempt}: one attempt of it, as a {@code SendMessageHook} sees it: {@code id},
 *     {@code broker}, {@code start}, {@code end}, {@code ok}, {@code error} (the exception's class);
 * <li>{@code held}: the brokers the producer's own fault table holds not available, sampled every
 *     {@link #SAMPLE_MS} and written when the set changes: {@code id}, {@code at}, {@code brokers};
 * <li>{@code applied}: a write of the follower into the producer's table
 *     ({@link FaultlineFollower.Listener}): {@code id}, {@code broker}, {@code decision},
 *     {@code state}, {@code effective_at}, {@code seen_at}, {@code until}, {@code at}.
 * </ul>
 *
 * <p>It also runs each producer's steady sending loop ({@link #run}): one thread a producer,
 * {@code rate} SYNC sends a second from a random phase, each period drawn within 10% of
 * {@code 1/rate} (producers drift apart, as real ones do, rather than meet every fault in the same
 * phase); a send that takes longer than the period delays the next (no burst to catch up), as an
 * application thread sending in turn would.
 */
final class Recorder implements FaultlineFollower.Listener {
    static final long SAMPLE_MS = 50;
    private static final JsonFactory JSON = new JsonFactory();

    private final Writer out;
    private final Map<DefaultMQProducer, String> ids = new IdentityHashMap<>();
    private final Map<String, List<String>> held = new ConcurrentHashMap<>();
    private final Map<String, Loop> loops = new ConcurrentHashMap<>();
    private final AtomicBoolean closed = new AtomicBoolean();
    private final Thread sampler;

    Recorder(String path) throws IOException {
        this.out = new BufferedWriter(Files.newBufferedWriter(Paths.get(path), StandardCharsets.UTF_8), 1 << 16);
        this.sampler = new Thread(this::sample, "faultline-harness-sampler");
        this.sampler.setDaemon(true);
        this.sampler.start();
    }

    /** Record {@code producer}'s attempts (before it starts) and its table, as {@code id}. */
    synchronized void watch(String id, DefaultMQProducer producer) {
        ids.put(producer, id);
        producer.getDefaultMQProducerImpl().registerSendMessageHook(new Attempts(id));
    }

    /** Start sending {@code rate} messages a second from {@code producer} until {@link #halt}. */
    void run(String id, Driver.Sender sender, double rate) {
        Loop loop = new Loop(id, sender, rate);
        if (loops.putIfAbsent(id, loop) != null) {
            throw new IllegalStateException(id + " is sending already");
        }
        loop.start();
    }

    /** Stop every loop (waiting for the send in flight); per producer, its sends and failures. */
    Map<String, Object> halt() throws InterruptedException {
        for (Loop l : loops.values()) {
            l.running.set(false);
        }
        Map<String, Object> counts = new LinkedHashMap<>();
        for (Loop l : loops.values()) {
            l.join(10_000);
            Map<String, Object> c = new LinkedHashMap<>();
            c.put("sends", l.sends.get());
            c.put("failed", l.failed.get());
            counts.put(l.id, c);
        }
        loops.clear();
        sampleOnce(true);
        flush();
        return counts;
    }

    @Override
    public void applied(DefaultMQProducer producer, String broker, BrokerDecision d, long until, long at) {
        String id;
        synchronized (this) {
            id = ids.get(producer);
        }
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("k", "applied");
        r.put("id", id);
        r.put("broker", broker);
        r.put("decision", d == null ? null : d.decision());
        r.put("state", d == null ? null : d.state().name());
        r.put("effective_at", d == null ? null : d.effectiveAt());
        r.put("seen_at", d == null ? null : d.seenAt());
        r.put("until", until);
        r.put("at", at);
        write(r);
    }

    void close() {
        if (closed.compareAndSet(false, true)) {
            try {
                sampler.join(1_000);
                synchronized (out) {
                    out.close();
                }
            } catch (IOException | InterruptedException e) {
                // best effort
            }
        }
    }

    private void sample() {
        for (long n = 1; !closed.get(); n++) {
            try {
                Thread.sleep(SAMPLE_MS);
                sampleOnce(false);
                if (n % 10 == 0) {
                    flush();
                }
            } catch (InterruptedException e) {
                return;
            } catch (Throwable e) {
                // a table read between two of the client's writes: the next sample
            }
        }
    }

    /** Each producer's held brokers, written when they changed (every one when {@code all}). */
    private void sampleOnce(boolean all) {
        Map<DefaultMQProducer, String> now;
        synchronized (this) {
            now = new IdentityHashMap<>(ids);
        }
        for (Map.Entry<DefaultMQProducer, String> e : now.entrySet()) {
            long at = System.currentTimeMillis();
            List<String> brokers = new ArrayList<>();
            try {
                for (Map.Entry<String, Object> item : Driver.table(e.getKey()).entrySet()) {
                    Object from = ((Map<?, ?>) item.getValue()).get("available_from");
                    if (from instanceof Long && (Long) from > at) {
                        brokers.add(item.getKey());
                    }
                }
            } catch (ReflectiveOperationException | RuntimeException x) {
                continue;
            }
            List<String> sorted = new ArrayList<>(new TreeSet<>(brokers));
            if (all || !sorted.equals(held.get(e.getValue()))) {
                held.put(e.getValue(), sorted);
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("k", "held");
                r.put("id", e.getValue());
                r.put("at", at);
                r.put("brokers", new ArrayList<Object>(sorted));
                write(r);
            }
        }
    }

    void flush() {
        synchronized (out) {
            try {
                out.flush();
            } catch (IOException e) {
                // best effort
            }
        }
    }

    private void write(Map<String, Object> r) {
        StringWriter w = new StringWriter();
        try (JsonGenerator g = JSON.createGenerator(w)) {
            Driver.write(g, r);
        } catch (IOException e) {
            return;
        }
        synchronized (out) {
            try {
                out.write(w.toString());
                out.write('\n');
            } catch (IOException e) {
                // closed
            }
        }
    }

    private final class Attempts implements SendMessageHook {
        private final String id;
        private final ThreadLocal<long[]> started = ThreadLocal.withInitial(() -> new long[1]);

        Attempts(String id) {
            this.id = id;
        }

        @Override
        public String hookName() {
            return "faultline-harness-record";
        }

        @Override
        public void sendMessageBefore(SendMessageContext context) {
            started.get()[0] = System.currentTimeMillis();
        }

        @Override
        public void sendMessageAfter(SendMessageContext context) {
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("k", "attempt");
            r.put("id", id);
            r.put("broker", context.getMq() == null ? null : context.getMq().getBrokerName());
            r.put("start", started.get()[0]);
            r.put("end", System.currentTimeMillis());
            Exception e = context.getException();
            r.put("ok", e == null);
            r.put("error", e == null ? null : e.getClass().getSimpleName());
            write(r);
        }
    }

    private final class Loop extends Thread {
        final String id;
        final Driver.Sender sender;
        final long periodNs;
        final AtomicBoolean running = new AtomicBoolean(true);
        final AtomicLong sends = new AtomicLong();
        final AtomicLong failed = new AtomicLong();

        Loop(String id, Driver.Sender sender, double rate) {
            super("faultline-harness-loop-" + id);
            setDaemon(true);
            this.id = id;
            this.sender = sender;
            this.periodNs = (long) (1e9 / rate);
        }

        @Override
        public void run() {
            Random random = new Random(id.hashCode());
            long next = System.nanoTime() + (long) (random.nextDouble() * periodNs);
            for (long n = 0; running.get(); n++) {
                long wait = next - System.nanoTime();
                if (wait > 0) {
                    try {
                        Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                if (!running.get()) {
                    break;
                }
                byte[] body = ("faultline closed loop " + id + " " + n).getBytes(StandardCharsets.UTF_8);
                long start = System.currentTimeMillis();
                long begin = System.nanoTime();
                String broker = null;
                String error = null;
                try {
                    broker = sender.send(body);
                } catch (Throwable e) {
                    error = e.getClass().getSimpleName() + ": " + String.valueOf(e.getMessage()).split("\n")[0];
                }
                long us = (System.nanoTime() - begin) / 1000;
                sends.incrementAndGet();
                if (error != null) {
                    failed.incrementAndGet();
                }
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("k", "send");
                r.put("id", id);
                r.put("start", start);
                r.put("end", System.currentTimeMillis());
                r.put("us", us);
                r.put("broker", broker);
                r.put("ok", error == null);
                r.put("error", error);
                write(r);
                next = Math.max(next + (long) (periodNs * (0.9 + 0.2 * random.nextDouble())), System.nanoTime());
            }
        }
    }
}
