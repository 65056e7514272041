package io.faultline.rocketmq.report;

import java.util.Iterator;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;

import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.hook.SendMessageContext;
import org.apache.rocketmq.client.hook.SendMessageHook;
import org.apache.rocketmq.client.impl.CommunicationMode;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.exception.RemotingException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A producer's {@link SendMessageHook} that turns every send attempt it sees into a
 * {@code send_result} event (docs/events.md) and hands it to the
 * {@link SharedReporter}. {@code DefaultMQProducerImpl.sendKernelImpl} runs the hook around every
 * attempt, retries included.
 *
 * <p><b>An event.</b> The broker, topic and queue from the context's {@code mq} (ASYNC: the queue
 * that answered); the latency from the hook's Before to its After (they sit just inside the
 * client's own measurement); the event time when the After runs (the producer's wall clock); the
 * outcome from the result's status or the exception's class ({@code MQBrokerException} with its
 * response code, {@code RemotingException}, {@code InterruptedException},
 * {@code MQClientException}); the attempt (0, 1, 2) counted per message; {@code mode},
 * {@code max_attempts} from the producer's retry settings, {@code message_id} (the message's
 * {@code UNIQ_KEY}), {@code queue_id}, {@code body_size}, {@code delay_level}, and for a half
 * message {@code transaction} {@code PREPARED} with {@code transaction_id} (its {@code UNIQ_KEY},
 * the id the broker's checks carry) and {@code check_immunity}.
 *
 * <p><b>Threads.</b> The hook keeps no lock of its own on the send path: a SYNC (or ONEWAY)
 * attempt's start in a thread-local (Before and After run on the sending thread), an ASYNC one's
 * in a concurrent map by context (its After comes on a callback thread), a failed SYNC attempt in
 * a concurrent map by message (to number the retry). The event goes to the reporter under its
 * lock; nothing on the path waits for Kafka. Nothing the hook does throws into the send: an error
 * is counted ({@link #errors()}) and logged once.
 *
 * <p><b>What the hook cannot see</b> (docs/real-rocketmq.md):
 * <ul>
 * <li>SYNC's call-timeout {@code break}: the loop picks a queue, finds the budget spent and stops
 * without an attempt. When a failed SYNC attempt is one the producer retries (the outcome table:
 * {@link AttemptEffect}) and no further attempt of the message starts within
 * {@code callTimeoutGraceMs}, {@link #sweep} reports a {@code CALL_TIMEOUT} attempt after it: the
 * last broker, latency 0, at the failed attempt's time. (The loop also stops without an attempt
 * when no queue can be selected; that is reported the same way.)</li>
 * <li>ASYNC retries: the callback re-sends with the same context and no Before, and runs the
 * After once, at the end: one event per ASYNC send, attempt 0, timed from its first attempt, at
 * the broker that answered (or the first attempt's broker when it failed). ASYNC's dispatch
 * report ({@code updateFaultItem} with ~0 ms when the send leaves) the job derives itself. The
 * dispatch's After and the callback's share the context, and the dispatch sets its result to
 * null: when it does so while the answer comes in, the callback's After sees no result. It runs
 * on another thread than the Before (the dispatch's runs on the Before's), so it is still
 * reported, as a {@code SEND_OK} at the queue first sent to (its status and a retry's broker are
 * lost with the result).</li>
 * <li>A failure before any hook runs (no route, no broker address, a message that fails
 * validation): no attempt reached a broker; no event.</li>
 * <li>ONEWAY: no result comes back; a ONEWAY attempt without an exception is {@code SEND_OK}, as
 * the client's own fault table takes it (no isolation).</li>
 * <li>The producer's queue index ({@code queue_index}): a per-thread counter in the client, not
 * reported.</li>
 * </ul>
 * An application that sends the same {@code Message} object again at once after a send failed
 * may have that send numbered as the failed one's retry: attempts are counted per message object.
 */
public final class FaultlineSendHook implements SendMessageHook {
    private static final Logger log = LoggerFactory.getLogger(FaultlineSendHook.class);
    private static final long NO_START = Long.MIN_VALUE;
    /** An attempt whose After never came is forgotten after this long (ms). */
    static final long STALE_MS = 600_000;

    private final SharedReporter reporter;
    private final DefaultMQProducer producer;
    private final Profile profile;
    private final LongSupplier clock;
    private final long callTimeoutGraceMs;

    private final ThreadLocal<long[]> syncStart = new ThreadLocal<long[]>() {
        @Override
        protected long[] initialValue() {
            return new long[] {NO_START};
        }
    };
    private final ConcurrentHashMap<SendMessageContext, AsyncStart> asyncStart =
            new ConcurrentHashMap<SendMessageContext, AsyncStart>();
    /** SYNC messages whose last attempt failed and will be retried: by identity (Message has no equals). */
    private final ConcurrentHashMap<Message, Retrying> retrying = new ConcurrentHashMap<Message, Retrying>();
    private final AtomicLong errors = new AtomicLong();
    private final AtomicLong callTimeouts = new AtomicLong();
    private volatile boolean closed;

    /**
     * @param reporter where the events go
     * @param producer the producer whose sends these are (its retry settings are read at each send)
     * @param profile its client profile (for which failures it retries), with its retry codes
     * @param clock the wall clock in epoch ms
     * @param callTimeoutGraceMs how long after a failed attempt the next one must start before a
     *                           {@code CALL_TIMEOUT} is reported
     */
    public FaultlineSendHook(SharedReporter reporter, DefaultMQProducer producer, Profile profile, LongSupplier clock,
                             long callTimeoutGraceMs) {
        this.reporter = reporter;
        this.producer = producer;
        this.profile = profile;
        this.clock = clock;
        this.callTimeoutGraceMs = callTimeoutGraceMs;
    }

    /** An ASYNC send's Before: when, and on which thread (the one its dispatch After runs on). */
    private static final class AsyncStart {
        final long at;
        final Thread thread;

        AsyncStart(long at, Thread thread) {
            this.at = at;
            this.thread = thread;
        }
    }

    /** A failed SYNC attempt the producer will retry. */
    private static final class Retrying {
        final int nextAttempt;
        final String topic;
        final String broker;
        final String messageId;
        final int maxAttempts;
        final long failedAt;
        /** The next attempt's Before ran. */
        volatile boolean resumed;

        Retrying(int nextAttempt, String topic, String broker, String messageId, int maxAttempts, long failedAt) {
            this.nextAttempt = nextAttempt;
            this.topic = topic;
            this.broker = broker;
            this.messageId = messageId;
            this.maxAttempts = maxAttempts;
            this.failedAt = failedAt;
        }
    }

    @Override
    public String hookName() {
        return "faultline-reporter";
    }

    @Override
    public void sendMessageBefore(SendMessageContext context) {
        if (closed) {
            return;
        }
        try {
            long now = clock.getAsLong();
            if (context.getCommunicationMode() == CommunicationMode.ASYNC) {
                asyncStart.put(context, new AsyncStart(now, Thread.currentThread()));
            } else {
                syncStart.get()[0] = now;
                if (!retrying.isEmpty()) {
                    Retrying r = retrying.get(context.getMessage());
                    if (r != null) {
                        r.resumed = true;
                    }
                }
            }
        } catch (RuntimeException | LinkageError e) {
            failed(e);
        }
    }

    @Override
    public void sendMessageAfter(SendMessageContext context) {
        if (closed) {
            return;
        }
        try {
            after(context);
        } catch (RuntimeException | LinkageError e) {
            failed(e);
        }
    }

    private void after(SendMessageContext context) {
        SendResult result = context.getSendResult();
        Exception error = context.getException();
        CommunicationMode communication = context.getCommunicationMode();
        Message msg = context.getMessage();
        MessageQueue mq = context.getMq();
        long start;
        int attempt;
        int maxAttempts;
        SendMode mode;
        if (communication == CommunicationMode.ASYNC) {
            AsyncStart began = asyncStart.get(context);
            if (began == null) {
                return; // reported already (a failure before dispatch runs the After twice)
            }
            if (result == null && error == null && began.thread == Thread.currentThread()) {
                return; // the After at dispatch: the result comes through the callback
            }
            // Without a result or an exception on another thread: the callback's After, whose
            // result the dispatch After overwrote with null in the context they share (the
            // dispatch runs "context.setSendResult(null)" while the answer comes in): a success
            // (a failure sets the exception, which the dispatch leaves), at the queue sent to.
            if (!asyncStart.remove(context, began)) {
                return;
            }
            start = began.at;
            attempt = 0;
            maxAttempts = 1 + producer.getRetryTimesWhenSendAsyncFailed();
            mode = SendMode.ASYNC;
            if (result != null && result.getMessageQueue() != null) {
                mq = result.getMessageQueue(); // the broker that answered
            }
        } else {
            long[] began = syncStart.get();
            start = began[0];
            began[0] = NO_START;
            if (start == NO_START) {
                return; // no Before (the hook was installed during the send)
            }
            Retrying r = retrying.isEmpty() ? null : retrying.remove(msg);
            attempt = r == null ? 0 : r.nextAttempt;
            mode = communication == CommunicationMode.ONEWAY ? SendMode.ONEWAY : SendMode.SYNC;
            maxAttempts = mode == SendMode.SYNC ? 1 + producer.getRetryTimesWhenSendFailed() : 1;
        }
        if (mq == null) {
            return;
        }
        Outcome outcome;
        Integer responseCode = null;
        if (result != null) {
            outcome = Outcome.valueOf(result.getSendStatus().name());
        } else if (error != null) {
            outcome = outcome(error);
            if (error instanceof MQBrokerException) {
                responseCode = ((MQBrokerException) error).getResponseCode();
            }
        } else {
            outcome = Outcome.SEND_OK; // ONEWAY: nothing comes back
        }
        String messageId = msg.getProperty("UNIQ_KEY");
        if (messageId == null && result != null) {
            messageId = result.getMsgId();
        }
        SendEvent event = new SendEvent(0, mq.getTopic(), mq.getBrokerName(), 0, outcome)
                .attempt(attempt)
                .mode(mode)
                .queueId(mq.getQueueId())
                .messageId(messageId)
                .responseCode(responseCode)
                .maxAttempts(maxAttempts);
        byte[] body = msg.getBody();
        if (body != null) {
            event.bodySize((long) body.length);
        }
        if (msg.getProperty("DELAY") != null) {
            int level = msg.getDelayTimeLevel();
            if (level > 0) {
                event.delayLevel(level);
            }
        }
        if ("true".equals(msg.getProperty("TRAN_MSG"))) {
            event.transaction("PREPARED").transactionId(messageId);
            String immunity = msg.getProperty("CHECK_IMMUNITY_TIME_IN_SECONDS");
            if (immunity != null) {
                event.field("check_immunity", immunity);
            }
        }
        long at = reporter.sendEnded(event, start);
        if (mode == SendMode.SYNC && outcome != Outcome.SEND_OK) {
            AttemptEffect effect = AttemptEffect.of(profile, outcome, event.latencyMs(), SendMode.SYNC, attempt,
                    maxAttempts, responseCode, null, false, producer.isRetryAnotherBrokerWhenNotStoreOK(), false);
            if (effect.next == AttemptEffect.Next.RETRY) {
                retrying.put(msg, new Retrying(attempt + 1, mq.getTopic(), mq.getBrokerName(), messageId, maxAttempts,
                        at));
            }
        }
    }

    /**
     * What a timer calls: a failed SYNC attempt the producer retries, whose next attempt did not
     * start within the grace, becomes a {@code CALL_TIMEOUT} event; ASYNC sends whose result never
     * came, and retries that never ended, are forgotten after 10 minutes.
     */
    public void sweep() {
        long now = clock.getAsLong();
        for (Iterator<Map.Entry<Message, Retrying>> it = retrying.entrySet().iterator(); it.hasNext(); ) {
            Map.Entry<Message, Retrying> entry = it.next();
            Retrying r = entry.getValue();
            if (!r.resumed && now - r.failedAt >= callTimeoutGraceMs) {
                if (retrying.remove(entry.getKey(), r)) {
                    callTimeouts.incrementAndGet();
                    reporter.send(new SendEvent(r.failedAt, r.topic, r.broker, 0, Outcome.CALL_TIMEOUT)
                            .attempt(r.nextAttempt)
                            .mode(SendMode.SYNC)
                            .messageId(r.messageId)
                            .maxAttempts(r.maxAttempts));
                }
            } else if (now - r.failedAt >= STALE_MS) {
                retrying.remove(entry.getKey(), r);
            }
        }
        for (Iterator<AsyncStart> it = asyncStart.values().iterator(); it.hasNext(); ) {
            if (now - it.next().at >= STALE_MS) {
                it.remove();
            }
        }
    }

    /** From now on the hook reports nothing (RocketMQ has no way to remove a hook). */
    public void close() {
        closed = true;
        retrying.clear();
        asyncStart.clear();
    }

    /** Errors the hook met and swallowed. */
    public long errors() {
        return errors.get();
    }

    /** {@code CALL_TIMEOUT} attempts reported by {@link #sweep}. */
    public long callTimeouts() {
        return callTimeouts.get();
    }

    /** SYNC messages waiting for their retry, ASYNC sends waiting for their result. */
    int inFlight() {
        return retrying.size() + asyncStart.size();
    }

    /** How the client reports an attempt's exception. */
    static Outcome outcome(Throwable x) {
        if (x instanceof MQBrokerException) {
            return Outcome.BROKER_EXCEPTION;
        }
        if (x instanceof RemotingException) {
            return Outcome.REMOTING_EXCEPTION;
        }
        if (x instanceof InterruptedException) {
            return Outcome.INTERRUPTED;
        }
        if (x instanceof MQClientException) {
            if (x.getCause() instanceof RemotingException) {
                return Outcome.REMOTING_EXCEPTION;
            }
            String message = String.valueOf(x.getMessage());
            if (message.startsWith("wait response timeout") || message.startsWith("send request failed")
                    || message.startsWith("unknow reseaon")) {
                // ASYNC without a response (timeout, send failure), wrapped by the callback: the
                // outcome table's no-response branch (isolation, retried)
                return Outcome.REMOTING_EXCEPTION;
            }
        }
        return Outcome.CLIENT_EXCEPTION;
    }

    private void failed(Throwable e) {
        if (errors.getAndIncrement() == 0) {
            log.warn("faultline: the reporter's send hook failed (reported once; the send goes on)", e);
        }
    }
}
