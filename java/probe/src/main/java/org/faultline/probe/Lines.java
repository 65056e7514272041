package org.faultline.probe;

import java.io.BufferedWriter;
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.Map;

import com.alibaba.fastjson.JSON;

/** A JSON-lines file that several threads append to, one object per line. */
final class Lines implements AutoCloseable {
    private final BufferedWriter out;

    Lines(File file) throws IOException {
        this.out = new BufferedWriter(new OutputStreamWriter(new FileOutputStream(file), StandardCharsets.UTF_8));
    }

    synchronized void write(Map<String, Object> record) {
        try {
            out.write(JSON.toJSONString(record));
            out.write('\n');
            out.flush();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public synchronized void close() throws IOException {
        out.close();
    }
}
