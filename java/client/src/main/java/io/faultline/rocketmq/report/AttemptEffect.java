package io.faultline.rocketmq.report;

import java.util.Arrays;
import java.util.Collections;
import java.util.List;

/**
 * What one send attempt causes ({@code udfs.rocketmq._send.attempt_effect}): the
 * {@code updateFaultItem} calls it makes on the producer's fault table, in order, and what the
 * producer does next. The outcome table (SYNC and ONEWAY; {@code isolation} in 4.x / 5.x):
 *
 * <ul>
 * <li>returned (SEND_OK or a non-OK store status): no isolation, reachable; return (a non-OK
 * status is retried only with {@code retryAnotherBrokerWhenNotStoreOK});</li>
 * <li>REMOTING_EXCEPTION: isolation, reachable unless 5.x's {@code startDetectorEnable}; retry;</li>
 * <li>CLIENT_EXCEPTION: isolation in 4.x only, reachable; retry;</li>
 * <li>BROKER_EXCEPTION: isolation, unreachable in 5.x; retry for a code of the retry set, else
 * fail;</li>
 * <li>INTERRUPTED: no isolation; fail;</li>
 * <li>CALL_TIMEOUT: no report (the loop stops before sending).</li>
 * </ul>
 *
 * <p>ASYNC: the dispatch is reported first (latency taken as 0, no isolation), then the result:
 * a success without isolation; a broker error with isolation and no retry; no response with
 * isolation and a retry while attempts remain (5.x: and budget). A client exception is thrown
 * before dispatch, an interruption reports only itself.
 */
public final class AttemptEffect {

    /** What the producer does after an attempt. */
    public enum Next {
        /** The caller gets a {@code SendResult}. */
        RETURN,
        /** Another attempt follows. */
        RETRY,
        /** The caller gets an exception. */
        FAIL
    }

    /** One {@code updateFaultItem(broker, latency, isolation[, reachable])} call. */
    public static final class FaultReport {
        /** The attempt's latency, or 0 for an ASYNC dispatch. */
        public final long latencyMs;
        public final boolean isolation;
        public final boolean reachable;
        /** The report {@code sendDefaultImpl} makes when an ASYNC send leaves (latency taken as 0). */
        public final boolean dispatch;

        FaultReport(long latencyMs, boolean isolation, boolean reachable, boolean dispatch) {
            this.latencyMs = latencyMs;
            this.isolation = isolation;
            this.reachable = reachable;
            this.dispatch = dispatch;
        }
    }

    // ClientErrorCode values MQClientException carries after the last failed attempt.
    static final int CONNECT_BROKER_EXCEPTION = 10001;
    static final int ACCESS_BROKER_TIMEOUT = 10002;
    static final int BROKER_NOT_EXIST_EXCEPTION = 10003;

    private static final FaultReport DISPATCH = new FaultReport(0, false, true, true);

    public final List<FaultReport> reports;
    public final Next next;
    /** With FAIL: the response code of the exception the caller gets (null when none is modelled). */
    public final Integer errorCode;

    private AttemptEffect(List<FaultReport> reports, Next next, Integer errorCode) {
        this.reports = reports;
        this.next = next;
        this.errorCode = errorCode;
    }

    /** Attempts in total with RocketMQ's defaults: SYNC 1 + 2, ASYNC 1 + 2 (the callback's), ONEWAY 1. */
    public static int maxAttempts(SendMode mode) {
        return mode == SendMode.ONEWAY ? 1 : 3;
    }

    /** {@link #of(Profile, Outcome, long, SendMode, int, Integer, Integer, Long, boolean, boolean, boolean)}
     * with RocketMQ's defaults: all attempts of the mode, budget not checked, no detector, no retry of a
     * non-OK store status, no earlier result. */
    public static AttemptEffect of(Profile profile, Outcome outcome, long latencyMs, SendMode mode, int attempt,
                                   Integer responseCode) {
        return of(profile, outcome, latencyMs, mode, attempt, null, responseCode, null, false, false, false);
    }

    /**
     * The outcome table for one attempt ({@code attempt} 0 is the first).
     *
     * @param attemptsTotal the send's attempts in all (null: {@link #maxAttempts})
     * @param remainingTimeoutMs the budget left after this attempt (5.x ASYNC retries need it above 0;
     *                           null: not checked)
     * @param earlierResult an earlier attempt returned a non-OK status (a failure then returns it)
     */
    public static AttemptEffect of(Profile profile, Outcome outcome, long latencyMs, SendMode mode, int attempt,
                                   Integer attemptsTotal, Integer responseCode, Long remainingTimeoutMs,
                                   boolean startDetectorEnable, boolean retryAnotherBrokerWhenNotStoreOK,
                                   boolean earlierResult) {
        int total = attemptsTotal != null ? attemptsTotal : maxAttempts(mode);
        boolean hasMore = attempt + 1 < total;
        boolean five = profile.isFive();
        Next end = earlierResult ? Next.RETURN : Next.FAIL;

        if (outcome == Outcome.CALL_TIMEOUT) {
            // the loop breaks before sending: no fault update
            return new AttemptEffect(Collections.<FaultReport>emptyList(), end, null);
        }
        if (mode == SendMode.ASYNC) {
            return async(profile, outcome, latencyMs, hasMore, responseCode, remainingTimeoutMs);
        }
        if (outcome.returned()) {
            boolean retry = mode == SendMode.SYNC && outcome != Outcome.SEND_OK
                    && retryAnotherBrokerWhenNotStoreOK && hasMore;
            return new AttemptEffect(one(latencyMs, false, true), retry ? Next.RETRY : Next.RETURN, null);
        }
        if (outcome == Outcome.INTERRUPTED) {
            return new AttemptEffect(one(latencyMs, false, true), Next.FAIL, null);
        }
        List<FaultReport> report;
        int code;
        if (outcome == Outcome.REMOTING_EXCEPTION) {
            report = one(latencyMs, true, five ? !startDetectorEnable : true);
            code = ACCESS_BROKER_TIMEOUT;
        } else if (outcome == Outcome.CLIENT_EXCEPTION) {
            report = one(latencyMs, !five, true);
            code = BROKER_NOT_EXIST_EXCEPTION;
        } else { // BROKER_EXCEPTION
            report = one(latencyMs, true, !five);
            code = responseCode != null ? responseCode : -1;
            if (!profile.retries(responseCode)) {
                return new AttemptEffect(report, end, code);
            }
        }
        if (hasMore) {
            return new AttemptEffect(report, Next.RETRY, null);
        }
        return new AttemptEffect(report, end, code);
    }

    private static AttemptEffect async(Profile profile, Outcome outcome, long latencyMs, boolean hasMore,
                                       Integer responseCode, Long remainingTimeoutMs) {
        boolean five = profile.isFive();
        if (outcome.returned()) {
            return new AttemptEffect(two(new FaultReport(latencyMs, false, true, false)), Next.RETURN, null);
        }
        if (outcome == Outcome.INTERRUPTED) {
            return new AttemptEffect(one(latencyMs, false, true), Next.FAIL, null);
        }
        if (outcome == Outcome.CLIENT_EXCEPTION) {
            // thrown before dispatch (no broker address): ASYNC's single attempt there ends the send
            return new AttemptEffect(one(latencyMs, !five, true), Next.FAIL, BROKER_NOT_EXIST_EXCEPTION);
        }
        FaultReport report = new FaultReport(latencyMs, true, true, false);
        if (outcome == Outcome.BROKER_EXCEPTION) {
            // an error response: isolation (reachable stays true in 5.x), never retried
            return new AttemptEffect(two(report), Next.FAIL, responseCode != null ? responseCode : -1);
        }
        // no response: send failed, timed out
        boolean retry = hasMore && (!five || remainingTimeoutMs == null || remainingTimeoutMs > 0);
        return new AttemptEffect(two(report), retry ? Next.RETRY : Next.FAIL, retry ? null : ACCESS_BROKER_TIMEOUT);
    }

    private static List<FaultReport> one(long latencyMs, boolean isolation, boolean reachable) {
        return Collections.singletonList(new FaultReport(latencyMs, isolation, reachable, false));
    }

    private static List<FaultReport> two(FaultReport result) {
        return Arrays.asList(DISPATCH, result);
    }
}
