package io.github.axesched.executor;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small strict JSON reader and compact writer, enough for the executor protocol.
 *
 * <p>Reading refuses what the protocol refuses: input that is not valid UTF-8, a lone surrogate
 * escape, a key repeated in one object, anything after the value, and nesting deeper than
 * {@link #MAX_DEPTH}. Values map to Java as: object → {@code LinkedHashMap<String,Object>} (key
 * order kept), array → {@code ArrayList<Object>}, string → {@code String}, integer →
 * {@code Long} (or {@code BigInteger} beyond 64 bits), other numbers → {@code Double}, true/false
 * → {@code Boolean}, null → {@code null}.
 *
 * <p>Writing accepts those types and any {@link Map}, {@link Collection}, array, {@link Number},
 * {@link CharSequence}, {@link Boolean} or {@link RawJson}, and writes compact JSON.
 */
public final class Json {
    /** The deepest nesting of arrays and objects accepted. */
    public static final int MAX_DEPTH = 512;

    private Json() {}

    /** Thrown for input that is not one strict JSON value. */
    public static final class ParseException extends Exception {
        private static final long serialVersionUID = 1L;

        public ParseException(String message) {
            super(message);
        }
    }

    /** Already-encoded JSON text, written as is. */
    public record RawJson(String text) {}

    /** Decodes UTF-8 bytes strictly (no malformed or overlong sequences, no encoded surrogates). */
    public static String utf8(byte[] body) throws ParseException {
        String s = decode(body);
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isHighSurrogate(c)) {
                i++;
            } else if (Character.isLowSurrogate(c)) {
                throw new ParseException("invalid UTF-8");
            }
        }
        return s;
    }

    /**
     * Decodes UTF-8, turning each byte that is not part of a valid sequence into a lone low
     * surrogate (U+DC00 + byte), which valid input can never produce: the parser then refuses
     * it where it stands, naming the member it is in.
     */
    static String decode(byte[] b) {
        StringBuilder out = null;
        int n = b.length;
        int i = 0;
        while (i < n && b[i] >= 0) {
            i++;
        }
        if (i == n) {
            return new String(b, StandardCharsets.ISO_8859_1);
        }
        out = new StringBuilder(n);
        out.append(new String(b, 0, i, StandardCharsets.ISO_8859_1));
        while (i < n) {
            int c = b[i] & 0xff;
            if (c < 0x80) {
                out.append((char) c);
                i++;
                continue;
            }
            int need;
            int cp;
            int lo = 0x80;
            int hi = 0xBF;
            if (c >= 0xC2 && c <= 0xDF) {
                need = 1;
                cp = c & 0x1F;
            } else if (c >= 0xE0 && c <= 0xEF) {
                need = 2;
                cp = c & 0x0F;
                if (c == 0xE0) {
                    lo = 0xA0;
                } else if (c == 0xED) {
                    hi = 0x9F; // no encoded surrogates
                }
            } else if (c >= 0xF0 && c <= 0xF4) {
                need = 3;
                cp = c & 0x07;
                if (c == 0xF0) {
                    lo = 0x90;
                } else if (c == 0xF4) {
                    hi = 0x8F;
                }
            } else {
                out.append((char) (0xDC00 | c));
                i++;
                continue;
            }
            int j = 1;
            for (; j <= need && i + j < n; j++) {
                int cc = b[i + j] & 0xff;
                if (cc < (j == 1 ? lo : 0x80) || cc > (j == 1 ? hi : 0xBF)) {
                    break;
                }
                cp = cp << 6 | (cc & 0x3F);
            }
            if (j <= need) {
                out.append((char) (0xDC00 | c));
                i++;
                continue;
            }
            out.appendCodePoint(cp);
            i += need + 1;
        }
        return out.toString();
    }

    /** Parses one strict JSON value from UTF-8 bytes. */
    public static Object parse(byte[] body) throws ParseException {
        return parse(decode(body));
    }

    /** Parses one strict JSON value from text. */
    public static Object parse(String text) throws ParseException {
        Reader r = new Reader(text);
        r.skipSpace();
        Object v = r.value(0);
        r.skipSpace();
        if (r.pos != text.length()) {
            throw new ParseException("invalid character after the top-level value at offset " + r.pos);
        }
        return v;
    }

    /** Parses text that must be one JSON object. */
    @SuppressWarnings("unchecked")
    public static Map<String, Object> parseObject(byte[] body) throws ParseException {
        Object v = parse(body);
        if (!(v instanceof Map)) {
            throw new ParseException("the body must be a JSON object");
        }
        return (Map<String, Object>) v;
    }

    /** A member value kept with its source text (see {@link #parseCapturing}). */
    record Captured(Object value, String raw) {}

    /**
     * Parses strictly like {@link #parse(String)}, but stores the value of each member named key
     * of an object at one of the given nesting depths (1 = the top-level object) as a
     * {@link Captured}, so its source text is at hand (a run's params are handed over as sent).
     */
    static Object parseCapturing(String text, String key, int... depths) throws ParseException {
        Reader r = new Reader(text);
        r.captureKey = key;
        for (int d : depths) {
            r.captureDepths |= 1L << d;
        }
        r.skipSpace();
        Object v = r.value(0);
        r.skipSpace();
        if (r.pos != text.length()) {
            throw new ParseException("invalid character after the top-level value at offset " + r.pos);
        }
        return v;
    }

    /** Removes insignificant white space from strict JSON text, keeping everything else as is. */
    public static String compact(String text) {
        StringBuilder b = new StringBuilder(text.length());
        boolean inString = false;
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (inString) {
                b.append(c);
                if (c == '\\') {
                    b.append(text.charAt(++i));
                } else if (c == '"') {
                    inString = false;
                }
            } else if (c == '"') {
                inString = true;
                b.append(c);
            } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                b.append(c);
            }
        }
        return b.toString();
    }

    private static final class Reader {
        final String s;
        int pos;
        String captureKey;
        long captureDepths;
        final java.util.ArrayDeque<String> path = new java.util.ArrayDeque<>();

        /** The member being read, as a.b.c, and ": " — to start an error message; "" at the top. */
        String where() {
            if (path.isEmpty()) {
                return "";
            }
            StringBuilder b = new StringBuilder();
            java.util.Iterator<String> it = path.descendingIterator();
            while (it.hasNext()) {
                b.append(b.length() > 0 ? "." : "").append(it.next());
            }
            return b.append(": ").toString();
        }

        Reader(String s) {
            this.s = s;
        }

        boolean peek(char c) {
            return pos < s.length() && s.charAt(pos) == c;
        }

        void expect(char c) throws ParseException {
            if (!peek(c)) {
                throw new ParseException(pos < s.length()
                        ? "expected '" + c + "' at offset " + pos
                        : "unexpected end of JSON input");
            }
            pos++;
        }

        void skipSpace() {
            while (pos < s.length()) {
                char c = s.charAt(pos);
                if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                    return;
                }
                pos++;
            }
        }

        Object value(int depth) throws ParseException {
            if (pos >= s.length()) {
                throw new ParseException("unexpected end of JSON input");
            }
            char c = s.charAt(pos);
            switch (c) {
                case '{':
                    return object(depth + 1);
                case '[':
                    return array(depth + 1);
                case '"':
                    return string();
                case 't':
                    literal("true");
                    return Boolean.TRUE;
                case 'f':
                    literal("false");
                    return Boolean.FALSE;
                case 'n':
                    literal("null");
                    return null;
                default:
                    if (c == '-' || (c >= '0' && c <= '9')) {
                        return number();
                    }
                    throw new ParseException(where() + (Character.isSurrogate(c) ? "invalid UTF-8" : "invalid character "
                            + describe(c)) + " at offset " + pos);
            }
        }

        void literal(String word) throws ParseException {
            if (!s.startsWith(word, pos)) {
                throw new ParseException("invalid literal at offset " + pos);
            }
            pos += word.length();
        }

        Map<String, Object> object(int depth) throws ParseException {
            if (depth > MAX_DEPTH) {
                throw new ParseException("nested deeper than " + MAX_DEPTH);
            }
            pos++;
            Map<String, Object> m = new LinkedHashMap<>();
            skipSpace();
            if (peek('}')) {
                pos++;
                return m;
            }
            while (true) {
                skipSpace();
                if (!peek('"')) {
                    throw new ParseException("expected a string key at offset " + pos);
                }
                String key = string();
                skipSpace();
                expect(':');
                skipSpace();
                if (m.containsKey(key)) {
                    throw new ParseException(where() + "repeated key " + quote(key));
                }
                path.push(key);
                if (depth < 64 && (captureDepths & (1L << depth)) != 0 && key.equals(captureKey)) {
                    int start = pos;
                    Object v = value(depth);
                    m.put(key, new Captured(v, s.substring(start, pos)));
                } else {
                    m.put(key, value(depth));
                }
                path.pop();
                skipSpace();
                if (peek(',')) {
                    pos++;
                    continue;
                }
                expect('}');
                return m;
            }
        }

        List<Object> array(int depth) throws ParseException {
            if (depth > MAX_DEPTH) {
                throw new ParseException("nested deeper than " + MAX_DEPTH);
            }
            pos++;
            List<Object> a = new ArrayList<>();
            skipSpace();
            if (peek(']')) {
                pos++;
                return a;
            }
            while (true) {
                skipSpace();
                a.add(value(depth));
                skipSpace();
                if (peek(',')) {
                    pos++;
                    continue;
                }
                expect(']');
                return a;
            }
        }

        String string() throws ParseException {
            expect('"');
            StringBuilder b = null;
            int start = pos;
            while (true) {
                if (pos >= s.length()) {
                    throw new ParseException("unterminated string");
                }
                char c = s.charAt(pos);
                if (c == '"') {
                    String out = b == null ? s.substring(start, pos) : b.append(s, start, pos).toString();
                    pos++;
                    return out;
                }
                if (c < 0x20) {
                    throw new ParseException(where() + "control character in string at offset " + pos);
                }
                if (Character.isHighSurrogate(c) && pos + 1 < s.length() && Character.isLowSurrogate(s.charAt(pos + 1))) {
                    pos += 2;
                    continue;
                }
                if (Character.isSurrogate(c)) {
                    throw new ParseException(where() + "invalid UTF-8 at offset " + pos);
                }
                if (c != '\\') {
                    pos++;
                    continue;
                }
                if (b == null) {
                    b = new StringBuilder();
                }
                b.append(s, start, pos);
                pos++;
                if (pos >= s.length()) {
                    throw new ParseException("unterminated string");
                }
                char e = s.charAt(pos++);
                switch (e) {
                    case '"', '\\', '/' -> b.append(e);
                    case 'b' -> b.append('\b');
                    case 'f' -> b.append('\f');
                    case 'n' -> b.append('\n');
                    case 'r' -> b.append('\r');
                    case 't' -> b.append('\t');
                    case 'u' -> {
                        char u = hex4();
                        if (Character.isHighSurrogate(u)) {
                            if (!s.startsWith("\\u", pos)) {
                                throw new ParseException(where() + "lone surrogate escape at offset " + (pos - 6));
                            }
                            pos += 2;
                            char low = hex4();
                            if (!Character.isLowSurrogate(low)) {
                                throw new ParseException(where() + "lone surrogate escape at offset " + (pos - 12));
                            }
                            b.append(u).append(low);
                        } else if (Character.isLowSurrogate(u)) {
                            throw new ParseException(where() + "lone surrogate escape at offset " + (pos - 6));
                        } else {
                            b.append(u);
                        }
                    }
                    default -> throw new ParseException("invalid escape at offset " + (pos - 2));
                }
                start = pos;
            }
        }

        char hex4() throws ParseException {
            if (pos + 4 > s.length()) {
                throw new ParseException("unterminated \\u escape");
            }
            int v = 0;
            for (int i = 0; i < 4; i++) {
                int d = Character.digit(s.charAt(pos + i), 16);
                if (d < 0) {
                    throw new ParseException("invalid \\u escape at offset " + pos);
                }
                v = v * 16 + d;
            }
            pos += 4;
            return (char) v;
        }

        Object number() throws ParseException {
            int start = pos;
            if (peek('-')) {
                pos++;
            }
            if (peek('0')) {
                pos++;
            } else if (pos < s.length() && s.charAt(pos) >= '1' && s.charAt(pos) <= '9') {
                digits();
            } else {
                throw new ParseException("invalid number at offset " + start);
            }
            boolean integer = true;
            if (peek('.')) {
                integer = false;
                pos++;
                if (digits() == 0) {
                    throw new ParseException("invalid number at offset " + start);
                }
            }
            if (peek('e') || peek('E')) {
                integer = false;
                pos++;
                if (peek('+') || peek('-')) {
                    pos++;
                }
                if (digits() == 0) {
                    throw new ParseException("invalid number at offset " + start);
                }
            }
            String text = s.substring(start, pos);
            if (integer) {
                BigInteger big = new BigInteger(text);
                return big.bitLength() < 64 ? (Object) big.longValue() : big;
            }
            double d = Double.parseDouble(text);
            if (Double.isInfinite(d)) {
                throw new ParseException("number out of range at offset " + start);
            }
            return d;
        }

        int digits() {
            int n = 0;
            while (pos < s.length() && s.charAt(pos) >= '0' && s.charAt(pos) <= '9') {
                pos++;
                n++;
            }
            return n;
        }
    }

    private static String describe(char c) {
        return c < 0x20 || c > 0x7e ? String.format("U+%04X", (int) c) : "'" + c + "'";
    }

    /** Writes v as compact JSON. */
    public static String write(Object v) {
        StringBuilder b = new StringBuilder();
        write(b, v, 0);
        return b.toString();
    }

    /** Writes v as compact JSON, UTF-8 encoded. */
    public static byte[] bytes(Object v) {
        return write(v).getBytes(StandardCharsets.UTF_8);
    }

    private static void write(StringBuilder b, Object v, int depth) {
        if (depth > MAX_DEPTH) {
            throw new IllegalArgumentException("value nested deeper than " + MAX_DEPTH);
        }
        if (v == null) {
            b.append("null");
        } else if (v instanceof RawJson r) {
            b.append(r.text());
        } else if (v instanceof CharSequence cs) {
            quote(b, cs.toString());
        } else if (v instanceof Boolean) {
            b.append(v.toString());
        } else if (v instanceof Double || v instanceof Float) {
            double d = ((Number) v).doubleValue();
            if (Double.isNaN(d) || Double.isInfinite(d)) {
                throw new IllegalArgumentException("cannot write " + d + " as JSON");
            }
            if (d == Math.rint(d) && Math.abs(d) < 1e15) {
                b.append((long) d);
            } else {
                b.append(d);
            }
        } else if (v instanceof Number) {
            b.append(v.toString());
        } else if (v instanceof Map<?, ?> m) {
            b.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (!first) {
                    b.append(',');
                }
                first = false;
                quote(b, String.valueOf(e.getKey()));
                b.append(':');
                write(b, e.getValue(), depth + 1);
            }
            b.append('}');
        } else if (v instanceof Collection<?> c) {
            b.append('[');
            boolean first = true;
            for (Object o : c) {
                if (!first) {
                    b.append(',');
                }
                first = false;
                write(b, o, depth + 1);
            }
            b.append(']');
        } else if (v.getClass().isArray()) {
            int n = java.lang.reflect.Array.getLength(v);
            b.append('[');
            for (int i = 0; i < n; i++) {
                if (i > 0) {
                    b.append(',');
                }
                write(b, java.lang.reflect.Array.get(v, i), depth + 1);
            }
            b.append(']');
        } else {
            throw new IllegalArgumentException("cannot write " + v.getClass().getName() + " as JSON");
        }
    }

    /** The JSON string literal of s. */
    public static String quote(String s) {
        StringBuilder b = new StringBuilder(s.length() + 2);
        quote(b, s);
        return b.toString();
    }

    private static void quote(StringBuilder b, String s) {
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20 || c == '\u2028' || c == '\u2029') {
                        b.append(String.format("\\u%04x", (int) c));
                    } else if (Character.isSurrogate(c)) {
                        // A lone surrogate cannot be UTF-8: write U+FFFD, as Go does.
                        if (Character.isHighSurrogate(c) && i + 1 < s.length()
                                && Character.isLowSurrogate(s.charAt(i + 1))) {
                            b.append(c).append(s.charAt(++i));
                        } else {
                            b.append('\uFFFD');
                        }
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        b.append('"');
    }
}
