package io.faultline.rocketmq.report;

import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * One send attempt's result, the fields of a {@code send_result} event (docs/events.md) that
 * {@link Reporter#send} takes: what Python's reporter takes as a dict. The four the
 * rule always needs are the constructor's; the others are left out of the record while unset
 * (null). {@code queueIndex}, the producer's {@code sendWhichQueue} after the send, goes into
 * summaries only. Fields the event has no setter for go through {@link #field}.
 *
 * <p>Not thread-safe; a reporter does not keep it after {@code send} returns.
 */
public final class SendEvent {
    /** The fields with a setter, which {@link #field} refuses. */
    static final Set<String> TYPED = Collections.unmodifiableSet(new HashSet<String>(Arrays.asList(
            "event_time", "topic", "broker_name", "latency_ms", "outcome", "attempt", "mode", "queue_id",
            "message_id", "response_code", "delay_level", "redelivery_count", "transaction", "transaction_id",
            "max_attempts", "body_size", "event_id", "queue_index", "kind")));

    long eventTime;
    String topic;
    String brokerName;
    long latencyMs;
    Outcome outcome;
    Integer attempt;
    SendMode mode;
    Integer queueId;
    String messageId;
    Integer responseCode;
    Integer delayLevel;
    Integer redeliveryCount;
    String transaction;
    String transactionId;
    Integer maxAttempts;
    Long bodySize;
    String eventId;
    Long queueIndex;
    Map<String, Object> extra;

    /** An attempt: when it ended (epoch ms, the producer's clock), where it went, how long it took and how it ended. */
    public SendEvent(long eventTime, String topic, String brokerName, long latencyMs, Outcome outcome) {
        this.eventTime = eventTime;
        this.topic = Objects.requireNonNull(topic, "topic");
        this.brokerName = Objects.requireNonNull(brokerName, "brokerName");
        this.latencyMs = latencyMs;
        this.outcome = Objects.requireNonNull(outcome, "outcome");
    }

    public SendEvent eventTime(long eventTime) {
        this.eventTime = eventTime;
        return this;
    }

    public SendEvent latencyMs(long latencyMs) {
        this.latencyMs = latencyMs;
        return this;
    }

    /** 0 for the first attempt; a retry ({@code > 0}) is reported in full. */
    public SendEvent attempt(Integer attempt) {
        this.attempt = attempt;
        return this;
    }

    /** SYNC (the record's default), ASYNC or ONEWAY. */
    public SendEvent mode(SendMode mode) {
        this.mode = mode;
        return this;
    }

    public SendEvent queueId(Integer queueId) {
        this.queueId = queueId;
        return this;
    }

    public SendEvent messageId(String messageId) {
        this.messageId = messageId;
        return this;
    }

    /** The broker's response code, with BROKER_EXCEPTION. */
    public SendEvent responseCode(Integer responseCode) {
        this.responseCode = responseCode;
        return this;
    }

    /** The delay level asked for: a delayed send (non-zero) is reported in full. */
    public SendEvent delayLevel(Integer delayLevel) {
        this.delayLevel = delayLevel;
        return this;
    }

    /** How many times faultline redelivered this message already: non-zero is reported in full. */
    public SendEvent redeliveryCount(Integer redeliveryCount) {
        this.redeliveryCount = redeliveryCount;
        return this;
    }

    /** {@code PREPARED} for a half message: a transactional send is reported in full. */
    public SendEvent transaction(String transaction) {
        this.transaction = transaction;
        return this;
    }

    public SendEvent transactionId(String transactionId) {
        this.transactionId = transactionId;
        return this;
    }

    /** The send's attempts in all (SYNC {@code 1 + retryTimesWhenSendFailed}, ...). */
    public SendEvent maxAttempts(Integer maxAttempts) {
        this.maxAttempts = maxAttempts;
        return this;
    }

    public SendEvent bodySize(Long bodySize) {
        this.bodySize = bodySize;
        return this;
    }

    /** The event's id; without one the reporter numbers it ({@code <producer_id>-r<9 digits>}). */
    public SendEvent eventId(String eventId) {
        this.eventId = eventId;
        return this;
    }

    /** The producer's {@code sendWhichQueue} after the send: carried into summaries only. */
    public SendEvent queueIndex(Long queueIndex) {
        this.queueIndex = queueIndex;
        return this;
    }

    /**
     * Any other field of a {@code send_result} (a string, an integer or a boolean), such as
     * {@code check_immunity}; a field with a setter is refused. Null removes it.
     */
    public SendEvent field(String name, Object value) {
        extra = WireJson.withField(extra, TYPED, name, value);
        return this;
    }

    public long eventTime() {
        return eventTime;
    }

    public String topic() {
        return topic;
    }

    public String brokerName() {
        return brokerName;
    }

    public long latencyMs() {
        return latencyMs;
    }

    public Outcome outcome() {
        return outcome;
    }

    public Integer attempt() {
        return attempt;
    }

    public SendMode mode() {
        return mode;
    }

    public String messageId() {
        return messageId;
    }

    /** The mode a summary is kept under: SYNC when unset. */
    String modeName() {
        return mode == null ? "SYNC" : mode.name();
    }

    /** The call's own fields, as a record holds them ({@code queue_index} and {@code event_id} left out). */
    void putFields(Map<String, Object> record) {
        record.put("event_time", eventTime);
        record.put("topic", topic);
        record.put("broker_name", brokerName);
        record.put("latency_ms", latencyMs);
        record.put("outcome", outcome.name());
        record.put("mode", modeName());
        putIf(record, "attempt", attempt);
        putIf(record, "queue_id", queueId);
        putIf(record, "message_id", messageId);
        putIf(record, "response_code", responseCode);
        putIf(record, "delay_level", delayLevel);
        putIf(record, "redelivery_count", redeliveryCount);
        putIf(record, "transaction", transaction);
        putIf(record, "transaction_id", transactionId);
        putIf(record, "max_attempts", maxAttempts);
        putIf(record, "body_size", bodySize);
        if (extra != null) {
            record.putAll(extra);
        }
    }

    static void putIf(Map<String, Object> record, String key, Object value) {
        if (value != null) {
            record.put(key, value);
        }
    }
}
