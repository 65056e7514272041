package io.faultline.rocketmq.report;

import io.faultline.rocketmq.Json;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** A test sink: takes (and keeps) every record while {@link #taking}, refuses every one otherwise. */
final class RecordingSink implements Sink {
    final List<String> keys = new ArrayList<String>();
    final List<String> records = new ArrayList<String>();
    volatile boolean taking = true;
    int offers;

    @Override
    public synchronized boolean offer(String key, byte[] value) {
        offers++;
        if (taking) {
            keys.add(key);
            records.add(new String(value, StandardCharsets.US_ASCII));
        }
        return taking;
    }

    synchronized Map<String, Object> record(int i) throws IOException {
        return Json.object(records.get(i));
    }

    synchronized int size() {
        return records.size();
    }
}
