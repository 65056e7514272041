package org.faultline.probe;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A transactional producer's listener whose answers follow the message's number: every fourth
 * commits at once, the next rolls back, the next answers UNKNOW and then COMMIT at its first
 * check, the last UNKNOW for ever (the broker checks it {@code transactionCheckMax} times, then
 * discards it). Each end becomes a faultline {@code transaction_end} event, each check the broker
 * sends a {@code transaction_check}: the broker's own check-backs, as the producer got them.
 */
final class Transactions implements TransactionListener {
    private final Lines events;
    private final Map<String, Object> base;
    /** The broker that stored each half message: a check's message does not name it. */
    private final Map<String, String> brokers = new ConcurrentHashMap<>();

    Transactions(Lines events, Map<String, Object> base) {
        this.events = events;
        this.base = base;
    }

    static LocalTransactionState plan(String messageId, int checks) {
        int n = Integer.parseInt(messageId.substring(messageId.lastIndexOf('-') + 1));
        switch (n % 4) {
            case 0:
                return LocalTransactionState.COMMIT_MESSAGE;
            case 1:
                return LocalTransactionState.ROLLBACK_MESSAGE;
            case 2:
                return checks == 0 ? LocalTransactionState.UNKNOW : LocalTransactionState.COMMIT_MESSAGE;
            default:
                return LocalTransactionState.UNKNOW;
        }
    }

    @Override
    public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
        Recorder.Sending s = (Recorder.Sending) arg;
        brokers.put(s.messageId, s.lastBroker);
        LocalTransactionState state = plan(s.messageId, 0);
        Map<String, Object> e = event("transaction_end", s.messageId, s.messageId + "-end", s.lastBroker);
        e.put("local_state", state.name());
        events.write(e);
        return state;
    }

    @Override
    public LocalTransactionState checkLocalTransaction(MessageExt msg) {
        String messageId = msg.getKeys();
        int checks = Integer.parseInt(String.valueOf(msg.getProperty("TRANSACTION_CHECK_TIMES")));
        LocalTransactionState state = plan(messageId, checks);
        Map<String, Object> e = event(
            "transaction_check", messageId, String.format("%s-check-%02d", messageId, checks),
            brokers.get(messageId));
        e.put("check_times", checks);
        e.put("local_state", state.name());
        events.write(e);
        return state;
    }

    private Map<String, Object> event(String kind, String messageId, String eventId, String broker) {
        Map<String, Object> e = new LinkedHashMap<>();
        e.put("cluster", base.get("cluster"));
        e.put("kind", kind);
        e.put("event_id", eventId);
        e.put("event_time", System.currentTimeMillis());
        e.put("producer_id", base.get("producer_id"));
        e.put("producer_group", base.get("producer_group"));
        e.put("client_profile", base.get("client_profile"));
        e.put("topic", base.get("topic"));
        e.put("message_id", messageId);
        e.put("transaction_id", messageId);
        e.put("broker_name", broker);
        return e;
    }
}
