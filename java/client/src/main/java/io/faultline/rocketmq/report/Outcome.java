package io.faultline.rocketmq.report;

/** How one send attempt ended, as producers report it ({@code udfs.rocketmq.Outcome}). */
public enum Outcome {
    SEND_OK,
    FLUSH_DISK_TIMEOUT,
    FLUSH_SLAVE_TIMEOUT,
    SLAVE_NOT_AVAILABLE,
    REMOTING_EXCEPTION,
    CLIENT_EXCEPTION,
    BROKER_EXCEPTION,
    INTERRUPTED,
    /** The total {@code sendMsgTimeout} budget ran out before this attempt was sent. */
    CALL_TIMEOUT;

    /** The broker answered with a status: the message is stored (maybe not flushed). */
    public boolean returned() {
        return this == SEND_OK || this == FLUSH_DISK_TIMEOUT || this == FLUSH_SLAVE_TIMEOUT
                || this == SLAVE_NOT_AVAILABLE;
    }
}
