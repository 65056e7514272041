package io.faultline.rocketmq.report;

import java.util.function.LongSupplier;
import java.util.function.Supplier;

/**
 * A {@link Reporter} shared by the threads of a producer (or consumer): every call takes one
 * lock, so the reporter sees one call at a time, in the order they took it. The hooks stamp an
 * event's time inside that lock ({@link #sendEnded}, {@link #consumeNow}), so the reporter sees
 * event times in order and no window closes before a send of its own time arrives.
 *
 * <p>The reporter is made at the first call (or {@link #flush}) from a factory: a RocketMQ
 * client's id ({@code clientId}, the reporter's producer id) is known only once it starts. After
 * {@link #close} every call is ignored.
 *
 * <p>Holding the lock costs a send the rule's work (a few hundred ns, measured by
 * {@code HookCost}); the sink is called under it too, and must not wait ({@link KafkaSink} never
 * does).
 */
public final class SharedReporter {
    private final Supplier<Reporter> factory;
    private final LongSupplier clock;
    private Reporter reporter;
    private boolean closed;

    /**
     * @param factory makes the reporter, at the first call
     * @param clock the wall clock in epoch ms ({@code System::currentTimeMillis})
     */
    public SharedReporter(Supplier<Reporter> factory, LongSupplier clock) {
        this.factory = factory;
        this.clock = clock;
    }

    /** One already made. */
    public SharedReporter(final Reporter reporter, LongSupplier clock) {
        this(new Supplier<Reporter>() {
            @Override
            public Reporter get() {
                return reporter;
            }
        }, clock);
    }

    private Reporter reporter() {
        if (reporter == null) {
            reporter = factory.get();
        }
        return reporter;
    }

    /** {@link Reporter#send} as it is. */
    public synchronized void send(SendEvent event) {
        if (!closed) {
            reporter().send(event);
        }
    }

    /**
     * The attempt that began at {@code startMs} ended now: its event time is the clock's now, read
     * under the lock, and its latency {@code now - startMs} (0 if the wall clock stepped back: the
     * job refuses a negative latency). Returns the event time (0 once closed).
     */
    public synchronized long sendEnded(SendEvent event, long startMs) {
        if (closed) {
            return 0;
        }
        long now = clock.getAsLong();
        event.eventTime(now).latencyMs(Math.max(0, now - startMs));
        reporter().send(event);
        return now;
    }

    /** {@link Reporter#consume} as it is. */
    public synchronized void consume(ConsumeEvent event) {
        if (!closed) {
            reporter().consume(event);
        }
    }

    /** A consume that ended now (the clock's, under the lock). */
    public synchronized void consumeNow(ConsumeEvent event) {
        if (!closed) {
            event.eventTime = clock.getAsLong();
            reporter().consume(event);
        }
    }

    /** The summaries whose window ended by now go out, and the buffer to the sink: what a timer
     * calls. Before the first call there is nothing to flush (and no reporter is made). */
    public synchronized void flush() {
        if (!closed && reporter != null) {
            reporter.flush(clock.getAsLong());
        }
    }

    /** The summaries whose window ended by {@code now} (epoch ms of event time) go out. */
    public synchronized void flush(long now) {
        if (!closed && reporter != null) {
            reporter.flush(now);
        }
    }

    /** Every open summary goes out, and the buffer to the sink. */
    public synchronized void flushAll() {
        if (!closed && reporter != null) {
            reporter.flush();
        }
    }

    /** Every open summary goes out; later calls are ignored. What the sink refuses stays pending:
     * {@link #drain} offers it again. */
    public synchronized void close() {
        if (!closed && reporter != null) {
            reporter.close();
        }
        closed = true;
    }

    /** After {@link #close}: offer the buffer to the sink again; returns what is still pending. */
    public synchronized int drain() {
        if (reporter == null) {
            return 0;
        }
        reporter.drain();
        return reporter.pending();
    }

    public synchronized boolean isClosed() {
        return closed;
    }

    /** The reporter's counters now (all zero before its first call). */
    public synchronized Counters counters() {
        Reporter r = reporter;
        return r == null ? new Counters(0, 0, 0, 0, 0)
                : new Counters(r.full(), r.summarized(), r.summaries(), r.dropped(), r.pending());
    }

    /** The reporter's producer id (null before its first call). */
    public synchronized String producerId() {
        return reporter == null ? null : reporter.producerId();
    }

    /** A reporter's counters at one moment. */
    public static final class Counters {
        /** Sends and consumes reported in full. */
        public final long full;
        /** Sends and consumes summarized. */
        public final long summarized;
        /** Summaries handed to the buffer (less those evicted). */
        public final long summaries;
        /** Records dropped for a full buffer. */
        public final long dropped;
        /** Records waiting for the sink. */
        public final int pending;

        Counters(long full, long summarized, long summaries, long dropped, int pending) {
            this.full = full;
            this.summarized = summarized;
            this.summaries = summaries;
            this.dropped = dropped;
            this.pending = pending;
        }

        @Override
        public String toString() {
            return "full=" + full + " summarized=" + summarized + " summaries=" + summaries + " dropped=" + dropped
                    + " pending=" + pending;
        }
    }
}
