/**
 * faultline's reporter for Java producers and consumers: a port of Python's
 * {@code streaming.client.Reporter} (docs/producers/summaries.md) that writes the same
 * bytes for the same calls ({@code tests/vectors/reporter}), a Kafka sink, and the RocketMQ hooks
 * that feed it ({@link io.faultline.rocketmq.report.FaultlineReporting#install}).
 */
package io.faultline.rocketmq.report;
