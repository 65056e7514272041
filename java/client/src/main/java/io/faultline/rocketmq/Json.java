package io.faultline.rocketmq;

import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;

/**
 * JSON text to plain Java values with jackson-core's streaming parser: an object is a
 * {@code Map<String, Object>} in its order, an array a {@code List<Object>}, a whole number a
 * {@code Long}, any other number a {@code Double}, then {@code String}, {@code Boolean} and
 * {@code null}. Only what the decisions topic carries needs reading; no data binding. Public for
 * the reporter's tests, which read the shared vectors with it; not an API of the library.
 */
public final class Json {
    private static final JsonFactory FACTORY = new JsonFactory();

    private Json() {
    }

    /** The value of {@code text}; an {@link IOException} when it is not one JSON value. */
    public static Object parse(String text) throws IOException {
        try (JsonParser parser = FACTORY.createParser(text)) {
            JsonToken token = parser.nextToken();
            if (token == null) {
                throw new IOException("no JSON value");
            }
            Object value = read(parser, token);
            if (parser.nextToken() != null) {
                throw new IOException("more than one JSON value");
            }
            return value;
        }
    }

    /** {@link #parse} of a JSON object; an {@link IOException} when it is anything else. */
    @SuppressWarnings("unchecked")
    public static Map<String, Object> object(String text) throws IOException {
        Object value = parse(text);
        if (!(value instanceof Map)) {
            throw new IOException("not a JSON object");
        }
        return (Map<String, Object>) value;
    }

    private static Object read(JsonParser parser, JsonToken token) throws IOException {
        switch (token) {
            case START_OBJECT: {
                Map<String, Object> map = new LinkedHashMap<>();
                for (JsonToken t = parser.nextToken(); t != JsonToken.END_OBJECT; t = parser.nextToken()) {
                    String name = parser.getCurrentName();
                    map.put(name, read(parser, parser.nextToken()));
                }
                return map;
            }
            case START_ARRAY: {
                List<Object> list = new ArrayList<>();
                for (JsonToken t = parser.nextToken(); t != JsonToken.END_ARRAY; t = parser.nextToken()) {
                    list.add(read(parser, t));
                }
                return list;
            }
            case VALUE_STRING:
                return parser.getText();
            case VALUE_NUMBER_INT:
                return parser.getLongValue();
            case VALUE_NUMBER_FLOAT:
                return parser.getDoubleValue();
            case VALUE_TRUE:
                return Boolean.TRUE;
            case VALUE_FALSE:
                return Boolean.FALSE;
            case VALUE_NULL:
                return null;
            default:
                throw new IOException("unexpected JSON token " + token);
        }
    }
}
