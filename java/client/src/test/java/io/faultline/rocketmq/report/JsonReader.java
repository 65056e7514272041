package io.faultline.rocketmq.report;

import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;

/** The tests' JSON reader (jackson-core's streaming parser): objects as ordered maps, integers as Long. */
final class JsonReader {
    private static final JsonFactory FACTORY = new JsonFactory();

    private JsonReader() {
    }

    static Object parse(String text) throws IOException {
        try (JsonParser p = FACTORY.createParser(text)) {
            p.nextToken();
            return value(p);
        }
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> object(String text) throws IOException {
        return (Map<String, Object>) parse(text);
    }

    private static Object value(JsonParser p) throws IOException {
        JsonToken t = p.currentToken();
        switch (t) {
            case START_OBJECT: {
                Map<String, Object> map = new LinkedHashMap<String, Object>();
                while (p.nextToken() != JsonToken.END_OBJECT) {
                    String name = p.currentName();
                    p.nextToken();
                    map.put(name, value(p));
                }
                return map;
            }
            case START_ARRAY: {
                List<Object> list = new ArrayList<Object>();
                while (p.nextToken() != JsonToken.END_ARRAY) {
                    list.add(value(p));
                }
                return list;
            }
            case VALUE_STRING:
                return p.getText();
            case VALUE_NUMBER_INT:
                return p.getLongValue();
            case VALUE_NUMBER_FLOAT:
                return p.getDoubleValue();
            case VALUE_TRUE:
                return Boolean.TRUE;
            case VALUE_FALSE:
                return Boolean.FALSE;
            case VALUE_NULL:
                return null;
            default:
                throw new IOException("unexpected " + t);
        }
    }
}
