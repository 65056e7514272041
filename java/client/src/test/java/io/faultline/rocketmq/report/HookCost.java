package io.faultline.rocketmq.report;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.hook.SendMessageContext;
import org.apache.rocketmq.client.impl.CommunicationMode;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The send hook's cost per send: a plain timing loop (not a test; run it by hand). Each send is
 * the hook's Before and After around a SYNC {@code SEND_OK} attempt on the wall clock, spread over
 * 12 brokers, with a sink that takes everything (each record's serialization included): what the
 * hook adds to a healthy send, which is summarized. Measured in 1, then N threads sharing the
 * producer's reporter (its lock).
 *
 * <pre>
 * java -cp CLASSPATH io.faultline.rocketmq.report.HookCost [sends per thread] [threads]
 * </pre>
 */
public final class HookCost {
    private static final AtomicLong taken = new AtomicLong();

    public static void main(String[] args) throws Exception {
        int sends = args.length > 0 ? Integer.parseInt(args[0]) : 2_000_000;
        int threads = args.length > 1 ? Integer.parseInt(args[1]) : 4;
        System.out.println("client profile detected: " + FaultlineReporting.detectProfile());
        FaultlineSendHook hook = hook();
        run(hook, 1, sends); // warm-up
        run(hook, threads, sends / threads);
        for (int round = 0; round < 3; round++) {
            report("1 thread ", run(hook, 1, sends), 1, sends);
            report(threads + " threads", run(hook, threads, sends), threads, sends);
        }
        System.out.println("records taken by the sink: " + taken.get() + "; " + hook.errors() + " errors");
    }

    static FaultlineSendHook hook() {
        DefaultMQProducer producer = new DefaultMQProducer("pg-bench");
        producer.setSendLatencyFaultEnable(true);
        FaultlineReporting reporting = FaultlineReporting.install(producer,
                new FaultlineReporting.Settings().producerId("p-bench").clientProfile("rocketmq-4.9"), new Sink() {
                    @Override
                    public boolean offer(String key, byte[] value) {
                        taken.incrementAndGet();
                        return true;
                    }
                });
        return reporting.sendHook();
    }

    private static void report(String what, long nanos, int threads, int sendsPerThread) {
        double perSend = (double) nanos * threads / ((double) threads * sendsPerThread);
        double aggregate = (double) nanos / ((double) threads * sendsPerThread);
        System.out.printf("%s: %6.0f ns per send in each thread, %6.0f ns of wall time per send (%d sends)%n", what,
                perSend, aggregate, (long) threads * sendsPerThread);
    }

    /** The wall time (ns) for {@code threads} threads to make {@code sends} sends each. */
    static long run(final FaultlineSendHook hook, int threads, final int sends) throws InterruptedException {
        final CountDownLatch start = new CountDownLatch(1);
        final CountDownLatch done = new CountDownLatch(threads);
        List<Thread> workers = new ArrayList<Thread>();
        for (int t = 0; t < threads; t++) {
            final int id = t;
            Thread w = new Thread(new Runnable() {
                @Override
                public void run() {
                    SendMessageContext[] contexts = new SendMessageContext[12];
                    for (int b = 0; b < contexts.length; b++) {
                        Message msg = new Message("orders", new byte[300]);
                        msg.getProperties().put("UNIQ_KEY", "m-" + id + "-" + b);
                        MessageQueue mq = new MessageQueue("orders", "broker-" + b, b % 4);
                        SendMessageContext c = new SendMessageContext();
                        c.setMessage(msg);
                        c.setMq(mq);
                        c.setCommunicationMode(CommunicationMode.SYNC);
                        c.setSendResult(new SendResult(SendStatus.SEND_OK, "m", "o", mq, 1));
                        contexts[b] = c;
                    }
                    try {
                        start.await();
                    } catch (InterruptedException e) {
                        return;
                    }
                    for (int i = 0; i < sends; i++) {
                        SendMessageContext c = contexts[i % contexts.length];
                        hook.sendMessageBefore(c);
                        hook.sendMessageAfter(c);
                    }
                    done.countDown();
                }
            });
            w.start();
            workers.add(w);
        }
        long began = System.nanoTime();
        start.countDown();
        done.await();
        long took = System.nanoTime() - began;
        for (Thread w : workers) {
            w.join();
        }
        return took;
    }

    private HookCost() {
    }
}
