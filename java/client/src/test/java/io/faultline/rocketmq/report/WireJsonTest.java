package io.faultline.rocketmq.report;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;

import org.junit.jupiter.api.Test;

/**
 * {@link WireJson} against Python's {@code streaming.client.serialize}: each expected text below
 * is what Python wrote for the same value (generated once with the project's Python, then pasted).
 */
class WireJsonTest {

    private static void check(String what, String value, String python) {
        Map<String, Object> record = new HashMap<String, Object>();
        record.put("s", value);
        byte[] bytes = WireJson.serialize(record);
        assertThat(new String(bytes, StandardCharsets.US_ASCII)).as(what).isEqualTo(python);
        assertThat(bytes).as(what).isEqualTo(python.getBytes(StandardCharsets.US_ASCII));
    }

    @Test
    void stringsAreEscapedAsPythonEscapesThem() {
        check("ascii, / not escaped", "broker-a /x", "{\"s\":\"broker-a /x\"}");
        check("latin", "b\u00e9", "{\"s\":\"b\\u00e9\"}");
        check("quotes and backslash", "say \"hi\" \\ back/slash", "{\"s\":\"say \\\"hi\\\" \\\\ back/slash\"}");
        check("every control character", "\000\001\002\003\004\005\006\007\010\011\012\013\014\015\016\017\020\021\022\023\024\025\026\027\030\031\032\033\034\035\036\037", "{\"s\":\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\"}");
        check("DEL", "\177~ ", "{\"s\":\"\\u007f~ \"}");
        check("BMP, U+2028, U+FFFF", "\u4e2d\u6587\u2028\uffff", "{\"s\":\"\\u4e2d\\u6587\\u2028\\uffff\"}");
        check("beyond U+FFFF: its surrogates", "\ud83d\ude00x", "{\"s\":\"\\ud83d\\ude00x\"}");
        check("lone surrogates", "a\ud800b\udc00", "{\"s\":\"a\\ud800b\\udc00\"}");
    }

    @Test
    void keysAreSortedAtEveryLevelWithoutWhitespace() {
        Map<String, Object> inner = new LinkedHashMap<String, Object>();
        inner.put("z", 1);
        inner.put("a", Arrays.asList(1L, 2L));
        inner.put("m", true);
        Map<String, Object> record = new LinkedHashMap<String, Object>();
        record.put("b", inner);
        record.put("a", false);
        record.put("n", -5L);
        record.put("big", Long.MAX_VALUE);
        record.put("e", new long[0]);
        record.put("o", Collections.emptyMap());
        assertThat(WireJson.toText(record)).isEqualTo("{\"a\":false,\"b\":{\"a\":[1,2],\"m\":true,\"z\":1},\"big\":9223372036854775807,\"e\":[],\"n\":-5,\"o\":{}}");
    }

    @Test
    void keysSortByCodePointAsPythonSortsThem() {
        Map<String, Object> record = new HashMap<String, Object>();
        record.put("\u00e9", 1);
        record.put("\ud83d\ude00", 2);
        record.put("\uffff", 3);
        record.put("z", 4);
        assertThat(WireJson.toText(record)).isEqualTo("{\"z\":4,\"\\u00e9\":1,\"\\uffff\":3,\"\\ud83d\\ude00\":2}");
        assertThat(WireJson.KEY_ORDER.compare("ab", "a")).isPositive();
        assertThat(WireJson.KEY_ORDER.compare("a", "ab")).isNegative();
        assertThat(WireJson.KEY_ORDER.compare("ab", "ab")).isZero();
    }

    @Test
    void nullMembersAreLeftOutAndOtherTypesRefused() {
        TreeMap<String, Object> record = WireJson.record();
        record.put("a", null);
        record.put("b", 1);
        record.put("c", new int[] {1, 2});
        assertThat(WireJson.toText(record)).isEqualTo("{\"b\":1,\"c\":[1,2]}");
        record.put("d", 0.5);
        assertThatThrownBy(() -> WireJson.serialize(record)).isInstanceOf(IllegalArgumentException.class);
        record.put("d", new ArrayList<Object>(Collections.singletonList(null)));
        assertThatThrownBy(() -> WireJson.serialize(record)).isInstanceOf(IllegalArgumentException.class);
    }
}
