package io.faultline.rocketmq.harness.spring;

import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import io.faultline.rocketmq.FaultlineFollower;
import io.faultline.rocketmq.harness.Driver;
import org.apache.rocketmq.client.hook.SendMessageContext;
import org.apache.rocketmq.client.hook.SendMessageHook;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.spring.core.RocketMQTemplate;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.messaging.support.MessageBuilder;

/**
 * A rocketmq-spring-boot-starter application as users write one: its producer is the starter's
 * {@code defaultMQProducer}, it sends through {@code RocketMQTemplate}, and faultline is on by
 * its one property ({@code --faultline.kafka.bootstrap-servers=...} among the arguments, as in
 * {@code application.properties}). Served as {@link Driver}'s producer {@code spring}, whose
 * {@code hooks} command says how many sends the application's {@code SendMessageHook} bean saw
 * (the auto-configuration registers it on the producer).
 *
 * <pre>
 * java -cp ... io.faultline.rocketmq.harness.spring.SpringDriver --topic T
 *     --rocketmq.name-server=... --rocketmq.producer.group=g --faultline.kafka.bootstrap-servers=...
 * </pre>
 */
@SpringBootApplication
public class SpringDriver {
    static final AtomicLong HOOKED = new AtomicLong();

    @Bean
    SendMessageHook countingHook() {
        return new SendMessageHook() {
            @Override
            public String hookName() {
                return "faultline-harness";
            }

            @Override
            public void sendMessageBefore(SendMessageContext context) {
            }

            @Override
            public void sendMessageAfter(SendMessageContext context) {
                HOOKED.incrementAndGet();
            }
        };
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> options = new HashMap<>();
        for (String a : args) {
            if (a.startsWith("--") && a.contains("=")) {
                options.put(a.substring(2, a.indexOf('=')), a.substring(a.indexOf('=') + 1));
            }
        }
        ConfigurableApplicationContext context = new SpringApplicationBuilder(SpringDriver.class)
            .web(WebApplicationType.NONE)
            .run(args);
        RocketMQTemplate template = context.getBean(RocketMQTemplate.class);
        DefaultMQProducer producer = template.getProducer();
        String topic = options.get("topic");
        Driver driver = new Driver(options) {
            @Override
            protected Map<String, Object> extra(String op, Map<String, Object> answer) {
                if ("hooks".equals(op)) {
                    answer.put("after", HOOKED.get());
                    answer.put("producer_is_the_bean", producer == context.getBean("defaultMQProducer"));
                    return answer;
                }
                return null;
            }
        };
        FaultlineFollower follower = context.getBeanProvider(FaultlineFollower.class).getIfAvailable();
        driver.add("spring", producer, body -> {
            SendResult r = template.syncSend(topic, MessageBuilder.withPayload(body).build());
            return r.getMessageQueue().getBrokerName();
        }, follower);
        driver.serve(false);
        context.close();
        System.exit(0);
    }
}
