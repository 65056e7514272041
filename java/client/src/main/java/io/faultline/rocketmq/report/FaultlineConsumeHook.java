package io.faultline.rocketmq.report;

import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.hook.ConsumeMessageContext;
import org.apache.rocketmq.client.hook.ConsumeMessageHook;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A push consumer's {@link ConsumeMessageHook} that reports each consumed message's result as a
 * {@code consume_result} event: successes are summarized per (group, topic) and window, a
 * {@code RECONSUME_LATER} goes in full (the job schedules its retry).
 *
 * <p>The event: the group, the message's topic (the consumer restores a retried message's own
 * topic before the hook runs), its id ({@code getMsgId}, the client's {@code UNIQ_KEY} for a push
 * consumer), the queue's broker and id, {@code reconsume_times}, the message's
 * {@code ORIGIN_MESSAGE_ID} when it has one, and the status, at the time the After runs.
 *
 * <p>What it cannot see: the listener's {@code ackIndex} (a concurrent batch that acknowledges
 * part of itself: every message of the batch gets the batch's status) and
 * {@code delayLevelWhenNextConsume} (left out: the broker decides). An orderly consumer's
 * statuses ({@code SUCCESS}, {@code COMMIT} as successes; {@code SUSPEND_CURRENT_QUEUE_A_MOMENT}
 * and {@code ROLLBACK} retry locally, never through the retry topic, and are not reported).
 */
public final class FaultlineConsumeHook implements ConsumeMessageHook {
    private static final Logger log = LoggerFactory.getLogger(FaultlineConsumeHook.class);

    private final SharedReporter reporter;
    private final AtomicLong errors = new AtomicLong();
    private volatile boolean closed;

    public FaultlineConsumeHook(SharedReporter reporter) {
        this.reporter = reporter;
    }

    @Override
    public String hookName() {
        return "faultline-reporter";
    }

    @Override
    public void consumeMessageBefore(ConsumeMessageContext context) {
        // nothing to time: a consume's event is its result
    }

    @Override
    public void consumeMessageAfter(ConsumeMessageContext context) {
        if (closed) {
            return;
        }
        try {
            String status = status(context.getStatus());
            List<MessageExt> messages = context.getMsgList();
            if (status == null || messages == null) {
                return;
            }
            MessageQueue mq = context.getMq();
            for (MessageExt msg : messages) {
                ConsumeEvent event = new ConsumeEvent(0, context.getConsumerGroup(), msg.getTopic(), msg.getMsgId(),
                        status)
                        .brokerName(mq != null ? mq.getBrokerName() : msg.getBrokerName())
                        .queueId(mq != null ? mq.getQueueId() : msg.getQueueId())
                        .reconsumeTimes(msg.getReconsumeTimes())
                        .originMessageId(msg.getProperty("ORIGIN_MESSAGE_ID"));
                reporter.consumeNow(event);
            }
        } catch (RuntimeException | LinkageError e) {
            if (errors.getAndIncrement() == 0) {
                log.warn("faultline: the reporter's consume hook failed (reported once; consuming goes on)", e);
            }
        }
    }

    /** The job's status for the listener's, or null for one not reported. */
    static String status(String status) {
        if (status == null) {
            return null;
        }
        switch (status) {
            case "CONSUME_SUCCESS":
            case "SUCCESS":
            case "COMMIT":
                return ConsumeEvent.CONSUME_SUCCESS;
            case "RECONSUME_LATER":
                return ConsumeEvent.RECONSUME_LATER;
            default:
                return null;
        }
    }

    /** From now on the hook reports nothing. */
    public void close() {
        closed = true;
    }

    /** Errors the hook met and swallowed. */
    public long errors() {
        return errors.get();
    }
}
