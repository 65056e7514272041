package io.faultline.rocketmq.spring;

import java.lang.reflect.Method;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Set;

import io.faultline.rocketmq.FaultlineFollower;
import org.apache.rocketmq.client.hook.SendMessageHook;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.config.BeanPostProcessor;

/**
 * Prepares each RocketMQ producer of the context before it starts: a {@code DefaultMQProducer}
 * bean, and the producer of a {@code RocketMQTemplate} bean (whose {@code afterPropertiesSet}
 * starts it, so this runs before, at the template's initialization). Each producer once:
 * {@code sendLatencyFaultEnable} on (with {@code faultline.latency-fault-enable}), the context's
 * {@code SendMessageHook} beans registered (the place of faultline's reporter), and followed by
 * the {@link FaultlineFollower}; its sends reported ({@link FaultlineReportingRegistry}).
 */
public class FaultlineProducerPostProcessor implements BeanPostProcessor {
    static final String TEMPLATE = "org.apache.rocketmq.spring.core.RocketMQTemplate";
    private static final Logger log = LoggerFactory.getLogger(FaultlineProducerPostProcessor.class);

    private final ObjectProvider<FaultlineFollower> follower;
    private final ObjectProvider<SendMessageHook> hooks;
    private final ObjectProvider<FaultlineProperties> properties;
    private final ObjectProvider<FaultlineReportingRegistry> reporting;
    private final Set<DefaultMQProducer> prepared = Collections.newSetFromMap(new IdentityHashMap<>());

    public FaultlineProducerPostProcessor(ObjectProvider<FaultlineFollower> follower,
                                          ObjectProvider<SendMessageHook> hooks,
                                          ObjectProvider<FaultlineProperties> properties,
                                          ObjectProvider<FaultlineReportingRegistry> reporting) {
        this.follower = follower;
        this.hooks = hooks;
        this.properties = properties;
        this.reporting = reporting;
    }

    @Override
    public Object postProcessBeforeInitialization(Object bean, String beanName) {
        DefaultMQProducer producer = null;
        if (bean instanceof DefaultMQProducer) {
            producer = (DefaultMQProducer) bean;
        } else if (isTemplate(bean.getClass())) {
            producer = producerOf(bean, beanName);
        }
        if (producer != null) {
            prepare(producer, beanName);
        }
        return bean;
    }

    private synchronized void prepare(DefaultMQProducer producer, String beanName) {
        if (!prepared.add(producer)) {
            return;
        }
        FaultlineProperties settings = properties.getIfAvailable();
        if (settings == null || settings.isLatencyFaultEnable()) {
            producer.setSendLatencyFaultEnable(true);
        }
        hooks.orderedStream().forEach(h -> producer.getDefaultMQProducerImpl().registerSendMessageHook(h));
        FaultlineReportingRegistry registry = reporting.getIfAvailable();
        if (registry != null) {
            registry.install(producer);
        }
        FaultlineFollower f = follower.getIfAvailable();
        if (f != null && f.follow(producer)) {
            log.info("faultline: producer {} ({}) follows cluster {}", producer.getProducerGroup(), beanName, f.cluster());
        }
    }

    private static boolean isTemplate(Class<?> type) {
        for (Class<?> c = type; c != null; c = c.getSuperclass()) {
            if (TEMPLATE.equals(c.getName())) {
                return true;
            }
        }
        return false;
    }

    private static DefaultMQProducer producerOf(Object template, String beanName) {
        try {
            Method get = template.getClass().getMethod("getProducer");
            Object p = get.invoke(template);
            return p instanceof DefaultMQProducer ? (DefaultMQProducer) p : null;
        } catch (ReflectiveOperationException | RuntimeException e) {
            log.warn("faultline: cannot reach the producer of {}: {}", beanName, e.toString());
            return null;
        }
    }
}
