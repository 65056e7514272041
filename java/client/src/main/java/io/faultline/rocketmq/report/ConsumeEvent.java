package io.faultline.rocketmq.report;

import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * One consume's result, the fields of a {@code consume_result} event that {@link Reporter#consume}
 * takes. A consume whose status is not {@code CONSUME_SUCCESS} (a {@code RECONSUME_LATER}) is
 * reported in full; successful ones are counted per (group, topic) and window. Unset fields
 * (null) are left out of the record; others go through {@link #field}.
 */
public final class ConsumeEvent {
    /** The consume that asks for nothing more. */
    public static final String CONSUME_SUCCESS = "CONSUME_SUCCESS";
    /** The consume that asks for a retry. */
    public static final String RECONSUME_LATER = "RECONSUME_LATER";

    static final Set<String> TYPED = Collections.unmodifiableSet(new HashSet<String>(Arrays.asList(
            "event_time", "consumer_group", "topic", "message_id", "status", "broker_name", "queue_id",
            "reconsume_times", "origin_message_id", "delay_level", "max_reconsume_times", "event_id", "kind")));

    long eventTime;
    String consumerGroup;
    String topic;
    String messageId;
    String status;
    String brokerName;
    Integer queueId;
    Integer reconsumeTimes;
    String originMessageId;
    Integer delayLevel;
    Integer maxReconsumeTimes;
    String eventId;
    Map<String, Object> extra;

    public ConsumeEvent(long eventTime, String consumerGroup, String topic, String messageId, String status) {
        this.eventTime = eventTime;
        this.consumerGroup = Objects.requireNonNull(consumerGroup, "consumerGroup");
        this.topic = Objects.requireNonNull(topic, "topic");
        this.messageId = messageId;
        this.status = Objects.requireNonNull(status, "status");
    }

    public ConsumeEvent brokerName(String brokerName) {
        this.brokerName = brokerName;
        return this;
    }

    public ConsumeEvent queueId(Integer queueId) {
        this.queueId = queueId;
        return this;
    }

    public ConsumeEvent reconsumeTimes(Integer reconsumeTimes) {
        this.reconsumeTimes = reconsumeTimes;
        return this;
    }

    public ConsumeEvent originMessageId(String originMessageId) {
        this.originMessageId = originMessageId;
        return this;
    }

    /** The delay level asked for with a retry (0: the broker decides). */
    public ConsumeEvent delayLevel(Integer delayLevel) {
        this.delayLevel = delayLevel;
        return this;
    }

    public ConsumeEvent maxReconsumeTimes(Integer maxReconsumeTimes) {
        this.maxReconsumeTimes = maxReconsumeTimes;
        return this;
    }

    /** The event's id; without one the reporter numbers it. */
    public ConsumeEvent eventId(String eventId) {
        this.eventId = eventId;
        return this;
    }

    /** Any other field of a {@code consume_result}; a field with a setter is refused. Null removes it. */
    public ConsumeEvent field(String name, Object value) {
        extra = WireJson.withField(extra, TYPED, name, value);
        return this;
    }

    public long eventTime() {
        return eventTime;
    }

    public String status() {
        return status;
    }

    void putFields(Map<String, Object> record) {
        record.put("event_time", eventTime);
        record.put("consumer_group", consumerGroup);
        record.put("topic", topic);
        SendEvent.putIf(record, "message_id", messageId);
        record.put("status", status);
        SendEvent.putIf(record, "broker_name", brokerName);
        SendEvent.putIf(record, "queue_id", queueId);
        SendEvent.putIf(record, "reconsume_times", reconsumeTimes);
        SendEvent.putIf(record, "origin_message_id", originMessageId);
        SendEvent.putIf(record, "delay_level", delayLevel);
        SendEvent.putIf(record, "max_reconsume_times", maxReconsumeTimes);
        if (extra != null) {
            record.putAll(extra);
        }
    }
}
