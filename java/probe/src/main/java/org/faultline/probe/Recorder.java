package org.faultline.probe;

import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.hook.SendMessageContext;
import org.apache.rocketmq.client.hook.SendMessageHook;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.exception.RemotingException;
import org.apache.rocketmq.remoting.exception.RemotingTooMuchRequestException;

/**
 * The producer's {@link SendMessageHook}: every attempt it sees becomes one faultline
 * {@code send_result} event. The latency is the wall-clock milliseconds from the hook's Before to
 * its After, which sit just inside the client's own measurement around {@code sendKernelImpl}.
 *
 * <p>What the hook cannot see, and what this recorder does about it:
 * <ul>
 * <li>SYNC's call-timeout {@code break} (the loop selects a queue, finds the budget spent and stops
 * without an attempt): {@link #end} writes a {@code CALL_TIMEOUT} event with no broker, as the
 * attempt after the last one the hook saw.</li>
 * <li>ASYNC: the hook's After at dispatch has no result and is not an event; the After from the
 * callback is, timed from the dispatch. Retries inside the callback reuse the context without
 * hooks: a retried ASYNC send is one event whose broker is the one that answered.</li>
 * <li>No route, no broker address, a message that fails validation: thrown before any hook, so
 * no event; the application sees them in {@code sends.jsonl}.</li>
 * </ul>
 */
final class Recorder implements SendMessageHook {

    /** One message on its way: its id and the attempts the hook saw so far. */
    static final class Sending {
        final String messageId;
        final long bornAt = System.currentTimeMillis();
        int attempts;
        long attemptStart;
        String lastBroker;

        Sending(String messageId) {
            this.messageId = messageId;
        }
    }

    private final Lines events;
    private final Map<String, Object> base;
    private final Map<Message, Sending> sending = Collections.synchronizedMap(new IdentityHashMap<>());

    Recorder(Lines events, Map<String, Object> base) {
        this.events = events;
        this.base = base;
    }

    Sending begin(Message msg, String messageId) {
        Sending s = new Sending(messageId);
        sending.put(msg, s);
        return s;
    }

    @Override
    public String hookName() {
        return "faultline-probe";
    }

    @Override
    public void sendMessageBefore(SendMessageContext context) {
        Sending s = sending.get(context.getMessage());
        if (s != null) {
            synchronized (s) {
                s.attemptStart = System.currentTimeMillis();
            }
        }
    }

    @Override
    public void sendMessageAfter(SendMessageContext context) {
        long now = System.currentTimeMillis();
        Sending s = sending.get(context.getMessage());
        if (s == null || (context.getSendResult() == null && context.getException() == null)) {
            return;  // not ours, or an ASYNC dispatch (its result comes through the callback)
        }
        MessageQueue mq = context.getMq();
        SendResult result = context.getSendResult();
        if (result != null && result.getMessageQueue() != null) {
            mq = result.getMessageQueue();  // ASYNC: the broker that answered
        }
        Map<String, Object> e = new LinkedHashMap<>(base);
        e.put("kind", "send_result");
        e.put("event_time", now);
        e.put("broker_name", mq.getBrokerName());
        e.put("queue_id", mq.getQueueId());
        e.put("message_id", s.messageId);
        e.put("body_size", context.getMessage().getBody().length);
        synchronized (s) {
            e.put("event_id", s.messageId + "-" + s.attempts);
            e.put("attempt", s.attempts);
            e.put("latency_ms", now - s.attemptStart);
            s.attempts++;
            s.lastBroker = mq.getBrokerName();
        }
        if ("true".equals(context.getMessage().getProperty("TRAN_MSG"))) {
            e.put("transaction", "PREPARED");  // a half message (sendMessageInTransaction)
            e.put("transaction_id", s.messageId);
        }
        if (result != null) {
            e.put("outcome", result.getSendStatus().name());
        } else {
            Throwable x = context.getException();
            e.put("outcome", outcome(x));
            if (x instanceof MQBrokerException) {
                e.put("response_code", ((MQBrokerException) x).getResponseCode());
            }
            e.put("exception", describe(x));
        }
        events.write(e);
    }

    /** SYNC: after {@code send} returned or threw. A call timeout the hook could not see becomes
     * its own event. */
    void end(Sending s, Throwable error) {
        sending.values().remove(s);
        if (error instanceof RemotingTooMuchRequestException && String.valueOf(error.getMessage()).contains("call timeout")) {
            Map<String, Object> e = new LinkedHashMap<>(base);
            long now = System.currentTimeMillis();
            e.put("kind", "send_result");
            e.put("event_time", now);
            e.put("message_id", s.messageId);
            synchronized (s) {
                e.put("event_id", s.messageId + "-" + s.attempts);
                e.put("attempt", s.attempts);
                e.put("broker_name", s.lastBroker);
            }
            e.put("latency_ms", 0);
            e.put("outcome", "CALL_TIMEOUT");
            e.put("exception", describe(error));
            events.write(e);
        }
    }

    /** A line of {@code sends.jsonl}: what the application got back. */
    static Map<String, Object> fate(Sending s, SendResult result, Throwable error) {
        Map<String, Object> f = new LinkedHashMap<>();
        f.put("message_id", s.messageId);
        f.put("born_at", s.bornAt);
        f.put("ended_at", System.currentTimeMillis());
        synchronized (s) {
            f.put("attempts_seen", s.attempts);
        }
        if (result != null) {
            f.put("status", result.getSendStatus().name());
            f.put("broker_name", result.getMessageQueue().getBrokerName());
            f.put("queue_id", result.getMessageQueue().getQueueId());
        } else {
            f.put("status", "FAILED");
            f.put("exception", describe(error));
        }
        return f;
    }

    static String outcome(Throwable x) {
        if (x instanceof MQBrokerException) {
            return "BROKER_EXCEPTION";
        }
        if (x instanceof RemotingException) {
            return "REMOTING_EXCEPTION";
        }
        if (x instanceof InterruptedException) {
            return "INTERRUPTED";
        }
        if (x instanceof MQClientException && x.getCause() instanceof RemotingException) {
            return "REMOTING_EXCEPTION";
        }
        if (x instanceof MQClientException && String.valueOf(x.getMessage()).startsWith("wait response timeout")) {
            return "REMOTING_EXCEPTION";  // ASYNC's timeout, wrapped by the callback
        }
        return "CLIENT_EXCEPTION";
    }

    static String describe(Throwable x) {
        String message = String.valueOf(x.getMessage());
        int cut = message.indexOf('\n');
        return x.getClass().getSimpleName() + ": " + (cut < 0 ? message : message.substring(0, cut));
    }
}
