package io.faultline.rocketmq.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.faultline.rocketmq.FaultlineFollower;
import org.apache.rocketmq.client.hook.SendMessageContext;
import org.apache.rocketmq.client.hook.SendMessageHook;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

/** One property turns faultline on for the context's producers; without it nothing changes. */
class FaultlineAutoConfigurationTest {
    private final ApplicationContextRunner runner = new ApplicationContextRunner()
        .withConfiguration(AutoConfigurations.of(FaultlineAutoConfiguration.class))
        .withUserConfiguration(Producers.class);

    @Configuration(proxyBeanMethods = false)
    static class Producers {
        @Bean
        DefaultMQProducer defaultMQProducer() {
            return new DefaultMQProducer("faultline-spring-test");
        }

        @Bean
        SendMessageHook countingHook() {
            return new SendMessageHook() {
                @Override
                public String hookName() {
                    return "counting";
                }

                @Override
                public void sendMessageBefore(SendMessageContext context) {
                }

                @Override
                public void sendMessageAfter(SendMessageContext context) {
                }
            };
        }
    }

    @Test
    void theBootstrapServersTurnTheFollowerOnForTheProducers() {
        runner.withPropertyValues("faultline.kafka.bootstrap-servers=127.0.0.1:1", "faultline.cluster=C",
                "faultline.decisions-topic=decisions", "faultline.out-of-route-hold=5s")
            .run(context -> {
                FaultlineFollower follower = context.getBean(FaultlineFollower.class);
                assertEquals("C", follower.cluster());
                assertEquals("decisions", follower.topic());
                assertEquals(1, follower.status().producers);
                DefaultMQProducer producer = context.getBean(DefaultMQProducer.class);
                assertTrue(producer.isSendLatencyFaultEnable());
                assertTrue(producer.getDefaultMQProducerImpl().hasSendMessageHook());
            });
    }

    @Test
    void theLatencyFaultSwitchCanBeLeftAlone() {
        runner.withPropertyValues("faultline.kafka.bootstrap-servers=127.0.0.1:1", "faultline.latency-fault-enable=false")
            .run(context -> assertFalse(context.getBean(DefaultMQProducer.class).isSendLatencyFaultEnable()));
    }

    @Test
    void withoutThePropertyNothingChanges() {
        runner.run(context -> {
            assertTrue(context.getBeansOfType(FaultlineFollower.class).isEmpty());
            DefaultMQProducer producer = context.getBean(DefaultMQProducer.class);
            assertFalse(producer.isSendLatencyFaultEnable());
            assertFalse(producer.getDefaultMQProducerImpl().hasSendMessageHook());
        });
        runner.withPropertyValues("faultline.kafka.bootstrap-servers=127.0.0.1:1", "faultline.enabled=false")
            .run(context -> assertTrue(context.getBeansOfType(FaultlineFollower.class).isEmpty()));
    }

    @Test
    void theProducersSendsAreReportedUnlessReportingIsOff() {
        runner.withPropertyValues("faultline.kafka.bootstrap-servers=127.0.0.1:1", "faultline.report.topic=results")
            .run(context -> {
                FaultlineReportingRegistry registry = context.getBean(FaultlineReportingRegistry.class);
                assertEquals(1, registry.installed().size());
                assertTrue(registry.installed().get(0).sendHook() != null);
            });
        runner.withPropertyValues("faultline.kafka.bootstrap-servers=127.0.0.1:1", "faultline.report.enabled=false")
            .run(context -> {
                assertTrue(context.getBeansOfType(FaultlineReportingRegistry.class).isEmpty());
                assertEquals(1, context.getBean(FaultlineFollower.class).status().producers);
            });
        runner.run(context -> assertTrue(context.getBeansOfType(FaultlineReportingRegistry.class).isEmpty()));
    }
}
