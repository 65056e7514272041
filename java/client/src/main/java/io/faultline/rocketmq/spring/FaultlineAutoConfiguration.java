package io.faultline.rocketmq.spring;

import io.faultline.rocketmq.FaultlineFollower;
import org.apache.rocketmq.client.hook.SendMessageHook;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnExpression;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

/**
 * faultline for a Spring Boot application's RocketMQ producers: with
 * {@code faultline.kafka.bootstrap-servers} set, a {@link FaultlineFollower} (a bean, started with
 * the context and closed with it) follows the decisions in every {@code DefaultMQProducer} bean
 * (rocketmq-spring-boot-starter's {@code defaultMQProducer}) and in the producer of every
 * {@code RocketMQTemplate} bean, whose {@code sendLatencyFaultEnable} it turns on
 * ({@code faultline.latency-fault-enable}), and on which it registers the context's
 * {@code SendMessageHook} beans ({@link FaultlineProducerPostProcessor}); and, unless
 * {@code faultline.report.enabled=false}, reports every producer's sends to the job
 * ({@link FaultlineReportingRegistry}).
 *
 * <p>Listed for Spring Boot 2.7 in {@code META-INF/spring.factories} and for 2.7 and 3.x in
 * {@code META-INF/spring/org.springframework.boot.autoconfigure.AutoConfiguration.imports}.
 */
@Configuration(proxyBeanMethods = false)
@ConditionalOnClass(name = {
    "org.apache.rocketmq.client.producer.DefaultMQProducer",
    "org.apache.kafka.clients.consumer.KafkaConsumer"})
@ConditionalOnProperty(prefix = "faultline", name = "enabled", havingValue = "true", matchIfMissing = true)
@EnableConfigurationProperties(FaultlineProperties.class)
public class FaultlineAutoConfiguration {

    @Bean(initMethod = "start", destroyMethod = "close")
    @ConditionalOnMissingBean
    @ConditionalOnProperty(prefix = "faultline.kafka", name = "bootstrap-servers")
    public FaultlineFollower faultlineFollower(FaultlineProperties properties) {
        return properties.follower();
    }

    @Bean
    @ConditionalOnMissingBean
    @ConditionalOnExpression("'${faultline.kafka.bootstrap-servers:}' != '' and '${faultline.report.enabled:true}' == 'true'")
    public FaultlineReportingRegistry faultlineReportingRegistry(FaultlineProperties properties) {
        return new FaultlineReportingRegistry(properties);
    }

    /**
     * Static: a {@code BeanPostProcessor} is made before the other beans, and must not make its
     * configuration early.
     */
    @Bean
    @ConditionalOnProperty(prefix = "faultline.kafka", name = "bootstrap-servers")
    public static FaultlineProducerPostProcessor faultlineProducerPostProcessor(
        ObjectProvider<FaultlineFollower> follower, ObjectProvider<SendMessageHook> hooks,
        ObjectProvider<FaultlineProperties> properties, ObjectProvider<FaultlineReportingRegistry> reporting) {
        return new FaultlineProducerPostProcessor(follower, hooks, properties, reporting);
    }
}
