package io.faultline.rocketmq.report;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.hook.ConsumeMessageContext;
import org.apache.rocketmq.client.hook.SendMessageContext;
import org.apache.rocketmq.client.impl.CommunicationMode;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.exception.RemotingTimeoutException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.util.Arrays;

/** The hooks driven as the client drives them (Before and After per attempt), on a clock of the test's. */
class FaultlineSendHookTest {
    static final long T0 = 1_795_255_200_000L;

    final AtomicLong now = new AtomicLong(T0);
    final RecordingSink sink = new RecordingSink();
    DefaultMQProducer producer;
    FaultlineReporting reporting;

    FaultlineSendHook install(String profile) {
        producer = new DefaultMQProducer("pg-orders");
        producer.setSendLatencyFaultEnable(true);
        FaultlineReporting.Settings settings = new FaultlineReporting.Settings()
                .producerId("p-1").cluster("C").clientProfile(profile).flushIntervalMs(3_600_000);
        settings.clock = new LongSupplier() {
            @Override
            public long getAsLong() {
                return now.get();
            }
        };
        reporting = FaultlineReporting.install(producer, settings, sink);
        return reporting.sendHook();
    }

    @AfterEach
    void close() {
        if (reporting != null) {
            reporting.close();
        }
    }

    static Message message(String id) {
        Message m = new Message("orders", "body".getBytes());
        m.putUserProperty("k", "v");
        m.getProperties().put("UNIQ_KEY", id);
        return m;
    }

    SendMessageContext context(Message msg, String broker, CommunicationMode mode) {
        SendMessageContext c = new SendMessageContext();
        c.setMessage(msg);
        c.setMq(new MessageQueue("orders", broker, 1));
        c.setCommunicationMode(mode);
        c.setProducer(producer.getDefaultMQProducerImpl());
        return c;
    }

    static SendResult ok(String broker) {
        return new SendResult(SendStatus.SEND_OK, "id", "offset-id", new MessageQueue("orders", broker, 2), 7);
    }

    /** One attempt: Before at now, After {@code took} ms later with a result or an exception. */
    void attempt(FaultlineSendHook hook, SendMessageContext c, long took, SendResult result, Exception error) {
        hook.sendMessageBefore(c);
        now.addAndGet(took);
        c.setSendResult(result);
        c.setException(error);
        hook.sendMessageAfter(c);
    }

    @Test
    void aSyncSendsAttemptsAreNumberedPerMessageAndTimedBeforeToAfter() throws IOException {
        FaultlineSendHook hook = install("rocketmq-4.9");
        Message msg = message("m-1");
        attempt(hook, context(msg, "broker-a", CommunicationMode.SYNC), 12, ok("broker-a"), null);
        Message other = message("m-2");
        attempt(hook, context(other, "broker-b", CommunicationMode.SYNC), 3000, null,
                new RemotingTimeoutException("timeout"));
        attempt(hook, context(other, "broker-c", CommunicationMode.SYNC), 5, ok("broker-c"), null);
        reporting.reporter().flushAll();

        // the failure sends broker-a's summary first (4.9, switch on), then itself; its retry in full
        assertThat(sink.size()).isEqualTo(3);
        Map<String, Object> summary = sink.record(0);
        assertThat(summary.get("kind")).isEqualTo("send_summary");
        assertThat(summary.get("broker_name")).isEqualTo("broker-a");
        assertThat(summary.get("latency_ms")).isEqualTo(12L);
        assertThat(summary.get("event_time")).isEqualTo(T0 + 12);
        assertThat(summary.get("producer_group")).isEqualTo("pg-orders");
        Map<String, Object> failure = sink.record(1);
        assertThat(failure.get("outcome")).isEqualTo("REMOTING_EXCEPTION");
        assertThat(failure.get("attempt")).isEqualTo(0L);
        assertThat(failure.get("latency_ms")).isEqualTo(3000L);
        assertThat(failure.get("event_time")).isEqualTo(T0 + 3012);
        assertThat(failure.get("message_id")).isEqualTo("m-2");
        assertThat(failure.get("max_attempts")).isEqualTo(3L);
        assertThat(failure.get("mode")).isEqualTo("SYNC");
        assertThat(failure.get("queue_id")).isEqualTo(1L);
        assertThat(failure.get("body_size")).isEqualTo(4L);
        assertThat(failure.get("client_profile")).isEqualTo("rocketmq-4.9");
        assertThat(failure.get("latency_fault_enable")).isEqualTo(true);
        Map<String, Object> retry = sink.record(2);
        assertThat(retry.get("attempt")).isEqualTo(1L);
        assertThat(retry.get("broker_name")).isEqualTo("broker-c");
        assertThat(retry.get("outcome")).isEqualTo("SEND_OK");
        assertThat(hook.inFlight()).isZero();
    }

    @Test
    void aRetryThatNeverStartsIsACallTimeoutAfterTheGrace() throws IOException {
        FaultlineSendHook hook = install("rocketmq-5");
        Message msg = message("m-3");
        attempt(hook, context(msg, "broker-b", CommunicationMode.SYNC), 2990, null,
                new RemotingTimeoutException("timeout"));
        long failedAt = now.get();
        now.addAndGet(999);
        hook.sweep();
        assertThat(sink.size()).isEqualTo(1);
        now.addAndGet(1);
        hook.sweep();
        assertThat(hook.callTimeouts()).isEqualTo(1);
        Map<String, Object> timeout = sink.record(1);
        assertThat(timeout.get("outcome")).isEqualTo("CALL_TIMEOUT");
        assertThat(timeout.get("attempt")).isEqualTo(1L);
        assertThat(timeout.get("broker_name")).isEqualTo("broker-b");
        assertThat(timeout.get("latency_ms")).isEqualTo(0L);
        assertThat(timeout.get("event_time")).isEqualTo(failedAt);
        assertThat(timeout.get("message_id")).isEqualTo("m-3");
        assertThat(hook.inFlight()).isZero();
    }

    @Test
    void aRetryThatStartedIsNoCallTimeoutAndAFailureNotRetriedExpectsNone() {
        FaultlineSendHook hook = install("rocketmq-4.9");
        Message msg = message("m-4");
        attempt(hook, context(msg, "broker-a", CommunicationMode.SYNC), 20, null,
                new RemotingTimeoutException("timeout"));
        hook.sendMessageBefore(context(msg, "broker-b", CommunicationMode.SYNC)); // the retry is on its way
        now.addAndGet(5000);
        hook.sweep();
        assertThat(hook.callTimeouts()).isZero();

        Message refused = message("m-5"); // SYSTEM_BUSY: 4.x does not retry it
        attempt(hook, context(refused, "broker-a", CommunicationMode.SYNC), 3, null,
                new MQBrokerException(2, "busy"));
        now.addAndGet(5000);
        hook.sweep();
        assertThat(hook.callTimeouts()).isZero();
        assertThat(sink.records.get(sink.size() - 1)).contains("\"response_code\":2");
        Message last = message("m-6"); // the last attempt failed: nothing follows
        SendMessageContext c = context(last, "broker-a", CommunicationMode.SYNC);
        attempt(hook, c, 3, null, new RemotingTimeoutException("t"));
        attempt(hook, context(last, "broker-b", CommunicationMode.SYNC), 3, null, new RemotingTimeoutException("t"));
        attempt(hook, context(last, "broker-c", CommunicationMode.SYNC), 3, null, new RemotingTimeoutException("t"));
        now.addAndGet(5000);
        hook.sweep();
        assertThat(hook.callTimeouts()).isZero();
        assertThat(sink.records.get(sink.size() - 1)).contains("\"attempt\":2");
    }

    @Test
    void anAsyncSendIsOneEventFromItsCallbackAtTheBrokerThatAnswered() throws IOException {
        FaultlineSendHook hook = install("rocketmq-5");
        Message msg = message("m-7");
        SendMessageContext c = context(msg, "broker-a", CommunicationMode.ASYNC);
        hook.sendMessageBefore(c);
        now.addAndGet(1);
        hook.sendMessageAfter(c); // dispatched: no result yet
        now.addAndGet(700);
        c.setSendResult(ok("broker-b")); // retried inside the callback, answered by broker-b
        hook.sendMessageAfter(c);

        Message early = message("m-8"); // fails before dispatch: the After runs twice, with the exception
        SendMessageContext e = context(early, "broker-c", CommunicationMode.ASYNC);
        hook.sendMessageBefore(e);
        e.setException(new MQClientException("send request failed", null));
        hook.sendMessageAfter(e);
        hook.sendMessageAfter(e);
        reporting.reporter().flushAll();

        assertThat(sink.size()).isEqualTo(2);
        Map<String, Object> slow = sink.record(0); // 701 ms: an isolating latency, in full at once
        assertThat(slow.get("outcome")).isEqualTo("SEND_OK");
        assertThat(slow.get("broker_name")).isEqualTo("broker-b");
        assertThat(slow.get("latency_ms")).isEqualTo(701L);
        assertThat(slow.get("mode")).isEqualTo("ASYNC");
        assertThat(slow.get("attempt")).isEqualTo(0L);
        assertThat(slow.get("max_attempts")).isEqualTo(3L);
        Map<String, Object> failure = sink.record(1); // once, though its After ran twice
        assertThat(failure.get("outcome")).isEqualTo("REMOTING_EXCEPTION");
        assertThat(failure.get("broker_name")).isEqualTo("broker-c");
        assertThat(failure.get("mode")).isEqualTo("ASYNC");
        assertThat(hook.inFlight()).isZero();
    }

    /** The dispatch's After sets the shared context's result to null while the answer comes in: the
     * callback's After, on its own thread, sees no result and is still the send's one event. */
    @Test
    void anAsyncResultOverwrittenByTheDispatchIsStillReported() throws Exception {
        final FaultlineSendHook hook = install("rocketmq-5");
        final SendMessageContext c = context(message("m-12"), "broker-a", CommunicationMode.ASYNC);
        hook.sendMessageBefore(c);
        hook.sendMessageAfter(c); // the dispatch, on the Before's thread: nothing yet
        now.addAndGet(9);
        Thread callback = new Thread(new Runnable() {
            @Override
            public void run() {
                hook.sendMessageAfter(c); // result already overwritten with null
            }
        });
        callback.start();
        callback.join();
        reporting.reporter().flushAll();
        assertThat(sink.size()).isEqualTo(1);
        Map<String, Object> summary = sink.record(0);
        assertThat(summary.get("kind")).isEqualTo("send_summary");
        assertThat(summary.get("broker_name")).isEqualTo("broker-a");
        assertThat(summary.get("latency_ms")).isEqualTo(9L);
        assertThat(summary.get("mode")).isEqualTo("ASYNC");
        assertThat(hook.inFlight()).isZero();
    }

    @Test
    void aClockThatStepsBackGivesLatencyZero() throws IOException {
        FaultlineSendHook hook = install("rocketmq-4.9");
        attempt(hook, context(message("m-11"), "broker-a", CommunicationMode.SYNC), -40, null,
                new RemotingTimeoutException("timeout"));
        assertThat(sink.record(0).get("latency_ms")).isEqualTo(0L);
    }

    @Test
    void aHalfMessageIsTransactionalAndADelayedOneCarriesItsLevel() throws IOException {
        FaultlineSendHook hook = install("rocketmq-4.9");
        Message half = message("tx-1");
        half.getProperties().put("TRAN_MSG", "true");
        half.getProperties().put("CHECK_IMMUNITY_TIME_IN_SECONDS", "30");
        attempt(hook, context(half, "broker-a", CommunicationMode.SYNC), 4, ok("broker-a"), null);
        Message delayed = message("d-1");
        delayed.setDelayTimeLevel(3);
        attempt(hook, context(delayed, "broker-a", CommunicationMode.SYNC), 4, ok("broker-a"), null);
        Map<String, Object> tx = sink.record(0);
        assertThat(tx.get("transaction")).isEqualTo("PREPARED");
        assertThat(tx.get("transaction_id")).isEqualTo("tx-1");
        assertThat(tx.get("check_immunity")).isEqualTo("30");
        assertThat(sink.record(1).get("delay_level")).isEqualTo(3L);
    }

    @Test
    void anAfterWithoutBeforeIsIgnoredAndTheHookNeverThrows() {
        FaultlineSendHook hook = install("rocketmq-4.9");
        SendMessageContext c = context(message("m-9"), "broker-a", CommunicationMode.SYNC);
        c.setSendResult(ok("broker-a"));
        hook.sendMessageAfter(c);
        hook.sendMessageBefore(new SendMessageContext()); // nothing set at all
        hook.sendMessageAfter(new SendMessageContext());
        assertThat(reporting.reporter().counters().summarized).isZero();
        assertThat(hook.errors()).isZero();
        SendMessageContext broken = context(null, "broker-a", CommunicationMode.SYNC); // no message
        hook.sendMessageBefore(broken);
        broken.setSendResult(ok("broker-a"));
        hook.sendMessageAfter(broken); // swallowed, counted
        assertThat(hook.errors()).isEqualTo(1);
    }

    @Test
    void installRegistersTheHookAndReadsTheProducer() {
        install("rocketmq-5");
        assertThat(producer.getDefaultMQProducerImpl().hasSendMessageHook()).isTrue();
        FaultlineSendHook hook = reporting.sendHook();
        attempt(hook, context(message("m-10"), "broker-a", CommunicationMode.SYNC), 4, ok("broker-a"), null);
        assertThat(reporting.reporter().producerId()).isEqualTo("p-1");
    }

    @Test
    void theProfileIsTheClientVersions() {
        assertThat(FaultlineReporting.detectProfile()).isEqualTo("rocketmq-4.9"); // the tests' client: 4.9.7
        assertThat(FaultlineReporting.profileOf("V4_7_1")).isEqualTo("rocketmq-4.7");
        assertThat(FaultlineReporting.profileOf("V4_9_3")).isEqualTo("rocketmq-4.7");
        assertThat(FaultlineReporting.profileOf("V4_9_4")).isEqualTo("rocketmq-4.9");
        assertThat(FaultlineReporting.profileOf("V4_9_8")).isEqualTo("rocketmq-4.9");
        assertThat(FaultlineReporting.profileOf("V5_3_3")).isEqualTo("rocketmq-5");
        assertThat(FaultlineReporting.profileOf("V5_0_0_SNAPSHOT")).isEqualTo("rocketmq-5");
        assertThat(FaultlineReporting.retryResponseCodes(new DefaultMQProducer("g")))
                .containsExactlyInAnyOrder(17, 14, 1, 16, 204, 205);
    }

    @Test
    void aConsumerReportsRetriesInFullAndSummarizesSuccesses() throws IOException {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("cg-orders");
        FaultlineReporting.Settings settings = new FaultlineReporting.Settings().producerId("consumer-1").cluster("C")
                .flushIntervalMs(3_600_000);
        settings.clock = new LongSupplier() {
            @Override
            public long getAsLong() {
                return now.get();
            }
        };
        reporting = FaultlineReporting.install(consumer, settings, sink);
        MessageExt a = new MessageExt();
        a.setTopic("orders");
        a.setMsgId("m-1");
        MessageExt b = new MessageExt();
        b.setTopic("orders");
        b.setMsgId("m-2");
        b.setReconsumeTimes(1);
        ConsumeMessageContext ok = new ConsumeMessageContext();
        ok.setConsumerGroup("cg-orders");
        ok.setMq(new MessageQueue("orders", "broker-a", 0));
        ok.setMsgList(Arrays.asList(a));
        ok.setStatus("CONSUME_SUCCESS");
        reporting.consumeHook().consumeMessageAfter(ok);
        ConsumeMessageContext later = new ConsumeMessageContext();
        later.setConsumerGroup("cg-orders");
        later.setMq(new MessageQueue("orders", "broker-a", 0));
        later.setMsgList(Arrays.asList(b));
        later.setStatus("RECONSUME_LATER");
        reporting.consumeHook().consumeMessageAfter(later);
        reporting.close();
        assertThat(sink.size()).isEqualTo(2);
        Map<String, Object> retry = sink.record(0);
        assertThat(retry.get("kind")).isEqualTo("consume_result");
        assertThat(retry.get("status")).isEqualTo("RECONSUME_LATER");
        assertThat(retry.get("reconsume_times")).isEqualTo(1L);
        assertThat(retry.get("broker_name")).isEqualTo("broker-a");
        assertThat(sink.keys.get(0)).isEqualTo("cg-orders");
        Map<String, Object> summary = sink.record(1);
        assertThat(summary.get("kind")).isEqualTo("consume_summary");
        assertThat(summary.get("messages")).isEqualTo(1L);
        reporting = null;
    }
}
