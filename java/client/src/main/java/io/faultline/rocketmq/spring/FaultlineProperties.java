package io.faultline.rocketmq.spring;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;

import io.faultline.rocketmq.FaultlineFollower;
import io.faultline.rocketmq.report.FaultlineReporting;
import org.springframework.boot.context.properties.ConfigurationProperties;

/**
 * {@code faultline.*} in {@code application.properties}: {@code faultline.kafka.bootstrap-servers}
 * turns faultline on for the application's RocketMQ producers; the rest have defaults.
 */
@ConfigurationProperties(prefix = "faultline")
public class FaultlineProperties {
    /** Whether faultline is on at all (with the bootstrap servers set). */
    private boolean enabled = true;
    private final Kafka kafka = new Kafka();
    /** The decisions topic faultline's job publishes to (its {@code decisions_topic}). */
    private String decisionsTopic = FaultlineFollower.DEFAULT_TOPIC;
    /** The producers' RocketMQ cluster, as faultline names it. */
    private String cluster = FaultlineFollower.DEFAULT_CLUSTER;
    /**
     * Turn on the producers' {@code sendLatencyFaultEnable}: a producer reads its fault table,
     * where faultline writes, only with it (and then also keeps its own isolations).
     */
    private boolean latencyFaultEnable = true;
    /** How long a broker the NameServer dropped is kept away (a producer's route poll). */
    private Duration outOfRouteHold = Duration.ofSeconds(30);
    /** The longest any decision keeps a broker away from when it was read. */
    private Duration maxHold = Duration.ofMinutes(10);
    /** A probation's period: open for its share of each, held for the rest. */
    private Duration probePeriod = Duration.ofSeconds(1);
    /** How often the producers' fault tables are brought in line with the decisions. */
    private Duration applyInterval = Duration.ofMillis(50);
    private final Report report = new Report();

    /** {@code faultline.report.*}: the producers' send results, to the job. */
    public static class Report {
        /** Whether every producer's sends are reported (with the bootstrap servers set). */
        private boolean enabled = true;
        /** The send-results topic the job reads (its {@code topic}). */
        private String topic = "faultline.events";

        public boolean isEnabled() {
            return enabled;
        }

        public void setEnabled(boolean enabled) {
            this.enabled = enabled;
        }

        public String getTopic() {
            return topic;
        }

        public void setTopic(String topic) {
            this.topic = topic;
        }
    }

    public static class Kafka {
        /** Kafka's bootstrap servers: setting them turns faultline on. */
        private String bootstrapServers;
        /** Kafka client settings (SASL, SSL, timeouts), over faultline's own: the follower's
         *  consumer and the reporter's producer take them both. */
        private Map<String, String> properties = new LinkedHashMap<>();

        public String getBootstrapServers() {
            return bootstrapServers;
        }

        public void setBootstrapServers(String bootstrapServers) {
            this.bootstrapServers = bootstrapServers;
        }

        public Map<String, String> getProperties() {
            return properties;
        }

        public void setProperties(Map<String, String> properties) {
            this.properties = properties;
        }
    }

    public boolean isEnabled() {
        return enabled;
    }

    public void setEnabled(boolean enabled) {
        this.enabled = enabled;
    }

    public Report getReport() {
        return report;
    }

    public Kafka getKafka() {
        return kafka;
    }

    public String getDecisionsTopic() {
        return decisionsTopic;
    }

    public void setDecisionsTopic(String decisionsTopic) {
        this.decisionsTopic = decisionsTopic;
    }

    public String getCluster() {
        return cluster;
    }

    public void setCluster(String cluster) {
        this.cluster = cluster;
    }

    public boolean isLatencyFaultEnable() {
        return latencyFaultEnable;
    }

    public void setLatencyFaultEnable(boolean latencyFaultEnable) {
        this.latencyFaultEnable = latencyFaultEnable;
    }

    public Duration getOutOfRouteHold() {
        return outOfRouteHold;
    }

    public void setOutOfRouteHold(Duration outOfRouteHold) {
        this.outOfRouteHold = outOfRouteHold;
    }

    public Duration getMaxHold() {
        return maxHold;
    }

    public void setMaxHold(Duration maxHold) {
        this.maxHold = maxHold;
    }

    public Duration getProbePeriod() {
        return probePeriod;
    }

    public void setProbePeriod(Duration probePeriod) {
        this.probePeriod = probePeriod;
    }

    public Duration getApplyInterval() {
        return applyInterval;
    }

    public void setApplyInterval(Duration applyInterval) {
        this.applyInterval = applyInterval;
    }

    /** The follower these settings describe (not started). */
    public FaultlineFollower follower() {
        return FaultlineFollower.builder(kafka.getBootstrapServers())
            .topic(decisionsTopic)
            .cluster(cluster)
            .kafkaProperties(kafka.getProperties())
            .outOfRouteHoldMs(outOfRouteHold.toMillis())
            .maxHoldMs(maxHold.toMillis())
            .probePeriodMs(probePeriod.toMillis())
            .applyIntervalMs(applyInterval.toMillis())
            .build();
    }

    /** The reporting these settings describe, for one producer. */
    public FaultlineReporting.Settings reporting() {
        return new FaultlineReporting.Settings()
            .bootstrapServers(kafka.getBootstrapServers())
            .topic(report.getTopic())
            .cluster(cluster)
            .kafka(kafka.getProperties());
    }
}
