package io.faultline.rocketmq.report;

import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.Comparator;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * A reporter's record as it goes on the wire: the bytes Python's
 * {@code streaming.client.serialize} writes ({@code json.dumps(record, separators=(",", ":"),
 * sort_keys=True)}), so that every reporter writes the same bytes for the same calls.
 *
 * <ul>
 * <li>an object's keys sorted at every level, by code point as Python sorts them
 * ({@link #KEY_ORDER}; byte order for the ASCII field names a record has);</li>
 * <li>no whitespace: {@code ,} between members and elements, {@code :} after a key;</li>
 * <li>strings with every character outside printable ASCII (U+0020 to U+007E) written
 * {@code \}{@code uXXXX}, four lowercase hex digits per UTF-16 code unit (a character beyond
 * U+FFFF is its two surrogates), except the short escapes {@code \"}, {@code \\}, {@code \n},
 * {@code \r}, {@code \t}, {@code \b} and {@code \f}; {@code /} is not escaped;</li>
 * <li>integers in decimal, {@code true} and {@code false}, lists (of integers, in a
 * record);</li>
 * <li>no {@code null}: a member whose value is null is left out, as the reporter leaves out a
 * field without a value. A fraction, a null element or any other type is refused
 * ({@link IllegalArgumentException}): a record has none.</li>
 * </ul>
 *
 * <p>Written by hand rather than with Jackson's generator: Jackson writes uppercase hex by
 * default and leaves U+007F unescaped, and the whole rule is this class.
 */
public final class WireJson {
    private static final char[] HEX = "0123456789abcdef".toCharArray();

    /** Python's order of strings: by code point (a surrogate pair sorts after U+FFFF). */
    public static final Comparator<String> KEY_ORDER = new Comparator<String>() {
        @Override
        public int compare(String a, String b) {
            int i = 0;
            int j = 0;
            while (i < a.length() && j < b.length()) {
                int x = a.codePointAt(i);
                int y = b.codePointAt(j);
                if (x != y) {
                    return x < y ? -1 : 1;
                }
                i += Character.charCount(x);
                j += Character.charCount(y);
            }
            return (a.length() - i) - (b.length() - j) == 0 ? 0 : (i < a.length() ? 1 : -1);
        }
    };

    private WireJson() {
    }

    /** An empty record whose keys are in {@link #KEY_ORDER}, which {@link #serialize} writes as it is. */
    public static TreeMap<String, Object> record() {
        return new TreeMap<String, Object>(KEY_ORDER);
    }

    /**
     * An event's fields beyond its setters ({@code extra}, made when first needed) with
     * {@code name} set to {@code value}, or removed when it is null; a name in {@code typed}, which
     * has a setter of its own, is refused.
     */
    static Map<String, Object> withField(Map<String, Object> extra, Set<String> typed, String name, Object value) {
        if (typed.contains(name)) {
            throw new IllegalArgumentException("'" + name + "' has a setter of its own");
        }
        if (value == null) {
            if (extra != null) {
                extra.remove(name);
            }
            return extra;
        }
        Map<String, Object> fields = extra != null ? extra : record();
        fields.put(name, value);
        return fields;
    }

    /** The record's bytes (ASCII). Keys are sorted whatever the map's own order. */
    public static byte[] serialize(Map<String, ?> record) {
        StringBuilder out = new StringBuilder(512);
        writeObject(out, record);
        return out.toString().getBytes(StandardCharsets.US_ASCII);
    }

    /** The same as text. */
    public static String toText(Map<String, ?> record) {
        StringBuilder out = new StringBuilder(512);
        writeObject(out, record);
        return out.toString();
    }

    static void writeObject(StringBuilder out, Map<String, ?> map) {
        Map<String, ?> sorted = map;
        if (!(map instanceof TreeMap) || ((TreeMap<String, ?>) map).comparator() != KEY_ORDER) {
            TreeMap<String, Object> copy = record();
            copy.putAll(map);
            sorted = copy;
        }
        out.append('{');
        boolean first = true;
        for (Map.Entry<String, ?> member : sorted.entrySet()) {
            if (member.getValue() == null) {
                continue;
            }
            if (!first) {
                out.append(',');
            }
            first = false;
            writeString(out, member.getKey());
            out.append(':');
            writeValue(out, member.getValue());
        }
        out.append('}');
    }

    @SuppressWarnings("unchecked")
    static void writeValue(StringBuilder out, Object value) {
        if (value instanceof String) {
            writeString(out, (String) value);
        } else if (value instanceof Long || value instanceof Integer || value instanceof Short
                || value instanceof Byte || value instanceof java.math.BigInteger) {
            out.append(value.toString());
        } else if (value instanceof Boolean) {
            out.append(((Boolean) value).booleanValue() ? "true" : "false");
        } else if (value instanceof long[]) {
            long[] values = (long[]) value;
            out.append('[');
            for (int i = 0; i < values.length; i++) {
                if (i > 0) {
                    out.append(',');
                }
                out.append(values[i]);
            }
            out.append(']');
        } else if (value instanceof int[]) {
            int[] values = (int[]) value;
            out.append('[');
            for (int i = 0; i < values.length; i++) {
                if (i > 0) {
                    out.append(',');
                }
                out.append(values[i]);
            }
            out.append(']');
        } else if (value instanceof Collection) {
            out.append('[');
            boolean first = true;
            for (Object element : (Collection<?>) value) {
                if (element == null) {
                    throw new IllegalArgumentException("a record has no null element");
                }
                if (!first) {
                    out.append(',');
                }
                first = false;
                writeValue(out, element);
            }
            out.append(']');
        } else if (value instanceof Map) {
            writeObject(out, (Map<String, ?>) value);
        } else {
            throw new IllegalArgumentException("a record holds strings, integers, booleans, lists and objects, not "
                    + (value == null ? "null" : value.getClass().getName()));
        }
    }

    /** A JSON string with the escapes above. */
    static void writeString(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0, n = s.length(); i < n; i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"':
                    out.append("\\\"");
                    break;
                case '\\':
                    out.append("\\\\");
                    break;
                case '\n':
                    out.append("\\n");
                    break;
                case '\r':
                    out.append("\\r");
                    break;
                case '\t':
                    out.append("\\t");
                    break;
                case '\b':
                    out.append("\\b");
                    break;
                case '\f':
                    out.append("\\f");
                    break;
                default:
                    if (c >= 0x20 && c <= 0x7e) {
                        out.append(c);
                    } else {
                        out.append("\\u").append(HEX[(c >> 12) & 0xf]).append(HEX[(c >> 8) & 0xf])
                                .append(HEX[(c >> 4) & 0xf]).append(HEX[c & 0xf]);
                    }
            }
        }
        out.append('"');
    }
}
