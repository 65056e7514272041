package io.faultline.rocketmq.report;

/** A send's communication mode ({@code udfs.rocketmq.SendMode}). */
public enum SendMode {
    SYNC,
    ASYNC,
    ONEWAY
}
