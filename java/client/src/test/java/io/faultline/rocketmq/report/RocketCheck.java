package io.faultline.rocketmq.report;

import java.nio.charset.StandardCharsets;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

/**
 * A check against a real RocketMQ (not a test; a harness runs it beside the testbed of
 * {@code streaming.sim.rocketmq} and injects faults): a producer with faultline's reporting
 * installed sends {@code COUNT} messages at {@code RATE} a second, and every record the reporter
 * makes is printed as {@code record KEY JSON}; the application's view of each send as
 * {@code send ID OK|FAILED}; the counters at the end.
 *
 * <pre>
 * java -cp CLASSPATH io.faultline.rocketmq.report.RocketCheck NAMESRV TOPIC SYNC|ASYNC COUNT RATE
 * </pre>
 */
public final class RocketCheck {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        String topic = args[1];
        boolean async = args[2].equals("ASYNC");
        int count = Integer.parseInt(args[3]);
        int rate = Integer.parseInt(args[4]);
        DefaultMQProducer producer = new DefaultMQProducer("pg-faultline-check-" + args[2]);
        producer.setNamesrvAddr(namesrv);
        producer.setSendLatencyFaultEnable(true);
        final FaultlineReporting reporting = FaultlineReporting.install(producer,
                new FaultlineReporting.Settings().cluster("DefaultCluster").flushIntervalMs(500), new Sink() {
                    @Override
                    public synchronized boolean offer(String key, byte[] value) {
                        System.out.println("record " + key + " " + new String(value, StandardCharsets.US_ASCII));
                        System.out.flush();
                        return true;
                    }
                });
        producer.start();
        long next = System.nanoTime();
        for (int i = 0; i < count; i++) {
            Message msg = new Message(topic, ("check " + i).getBytes(StandardCharsets.UTF_8));
            final String label = "n" + i;
            try {
                if (async) {
                    producer.send(msg, new SendCallback() {
                        @Override
                        public void onSuccess(SendResult result) {
                            System.out.println("send " + label + " OK " + result.getMsgId());
                        }

                        @Override
                        public void onException(Throwable e) {
                            System.out.println("send " + label + " FAILED " + e.getClass().getSimpleName());
                        }
                    });
                } else {
                    SendResult result = producer.send(msg);
                    System.out.println("send " + label + " OK " + result.getMsgId());
                }
            } catch (Exception e) {
                System.out.println("send " + label + " FAILED " + e.getClass().getSimpleName() + ": "
                        + String.valueOf(e.getMessage()).split("\n")[0]);
            }
            next += 1_000_000_000L / rate;
            long wait = next - System.nanoTime();
            if (wait > 0) {
                Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
            }
        }
        Thread.sleep(async ? 4000 : 500); // ASYNC results still coming
        reporting.close();
        System.out.println("counters " + reporting.reporter().counters() + " producer_id="
                + reporting.reporter().producerId() + " callTimeouts=" + reporting.sendHook().callTimeouts()
                + " errors=" + reporting.sendHook().errors());
        producer.shutdown();
    }

    private RocketCheck() {
    }
}
