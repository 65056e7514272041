package io.faultline.rocketmq.spring;

import java.util.ArrayList;
import java.util.List;

import io.faultline.rocketmq.report.FaultlineReporting;
import io.faultline.rocketmq.report.KafkaSink;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.springframework.beans.factory.DisposableBean;

/**
 * The reporting of a Spring context's producers ({@code faultline.report.enabled}, on by default):
 * one {@link FaultlineReporting} per producer, all publishing through one {@link KafkaSink} to
 * {@code faultline.report.topic}; closed with the context, the producers' open summaries first,
 * then the sink (which waits for Kafka to take what it holds, up to the reporting's close timeout).
 */
public class FaultlineReportingRegistry implements DisposableBean {
    private final FaultlineProperties properties;
    private final List<FaultlineReporting> installed = new ArrayList<>();
    private KafkaSink sink;

    public FaultlineReportingRegistry(FaultlineProperties properties) {
        this.properties = properties;
    }

    /** Report {@code producer}'s sends (before it starts). */
    public synchronized FaultlineReporting install(DefaultMQProducer producer) {
        FaultlineReporting.Settings settings = properties.reporting();
        if (sink == null) {
            sink = new KafkaSink(properties.getKafka().getBootstrapServers(), properties.getReport().getTopic(),
                properties.getKafka().getProperties());
        }
        FaultlineReporting reporting = FaultlineReporting.install(producer, settings, sink);
        installed.add(reporting);
        return reporting;
    }

    /** The installations so far (a copy). */
    public synchronized List<FaultlineReporting> installed() {
        return new ArrayList<>(installed);
    }

    @Override
    public synchronized void destroy() {
        for (FaultlineReporting reporting : installed) {
            reporting.close();
        }
        installed.clear();
        if (sink != null) {
            sink.close();
            sink = null;
        }
    }
}
