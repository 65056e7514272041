package io.faultline.rocketmq.report;

import java.util.function.LongSupplier;

/** The wall clock in epoch ms: the producer's clock, which event times are read from. */
final class SystemClock implements LongSupplier {
    static final SystemClock INSTANCE = new SystemClock();

    private SystemClock() {
    }

    @Override
    public long getAsLong() {
        return System.currentTimeMillis();
    }
}
