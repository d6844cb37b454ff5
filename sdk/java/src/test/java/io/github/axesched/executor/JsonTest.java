package io.github.axesched.executor;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

public class JsonTest {
    static Object parse(String s) throws Json.ParseException {
        return Json.parse(s.getBytes(StandardCharsets.UTF_8));
    }

    static String refused(String s) {
        return Check.throwsA(Json.ParseException.class, () -> parse(s), "parse " + s).getMessage();
    }

    public void testValues() throws Exception {
        Object v = parse(" {\"a\": [1, -2.5, \"x\", true, false, null, {}], \"b\": {\"c\": 9223372036854775807}} ");
        Map<?, ?> m = (Map<?, ?>) v;
        Check.eq(List.of(1L, -2.5, "x", true, false), ((List<?>) m.get("a")).subList(0, 5), "array");
        Check.isTrue(((List<?>) m.get("a")).get(5) == null, "null");
        Check.eq(Long.MAX_VALUE, ((Map<?, ?>) m.get("b")).get("c"), "max long");
        Check.eq(new BigInteger("9223372036854775808"), parse("9223372036854775808"), "beyond long");
        Check.eq(List.of("a", "b"), List.copyOf(m.keySet()), "key order kept");
    }

    public void testRepeatedKeyRefused() {
        Check.contains(refused("{\"a\":1,\"a\":2}"), "repeated key \"a\"", "top level");
        Check.contains(refused("{\"x\":[{\"b\":1,\"c\":2,\"b\":3}]}"), "repeated key \"b\"", "nested");
        Check.contains(refused("{\"a\":1,\"\\u0061\":2}"), "repeated key", "the same key escaped");
    }

    public void testSurrogates() throws Exception {
        Check.eq("😀", parse("\"\\ud83d\\ude00\""), "an escaped pair");
        Check.eq("😀", parse("\"😀\""), "a raw pair");
        Check.contains(refused("\"\\ud83d\""), "lone surrogate", "a lone high");
        Check.contains(refused("\"\\ude00\""), "lone surrogate", "a lone low");
        Check.contains(refused("\"\\ud83dx\""), "lone surrogate", "a high then text");
        Check.contains(refused("\"\\ud83d\\u0041\""), "lone surrogate", "a high then a non-low escape");
    }

    public void testInvalidUtf8() {
        for (byte[] b : new byte[][] {
                {'"', (byte) 0xC3, '(', '"'}, // bad continuation
                {'"', (byte) 0xC0, (byte) 0x80, '"'}, // overlong NUL
                {'"', (byte) 0xED, (byte) 0xA0, (byte) 0x80, '"'}, // an encoded surrogate
                {'"', (byte) 0xFF, '"'},
        }) {
            Check.contains(Check.throwsA(Json.ParseException.class, () -> Json.parse(b), "bytes").getMessage(),
                    "invalid UTF-8", "invalid UTF-8 refused");
        }
    }

    public void testTrailingAndMalformed() {
        Check.contains(refused("{} {}"), "after the top-level value", "two values");
        Check.contains(refused("{}x"), "after the top-level value", "trailing text");
        refused("");
        refused("{");
        refused("{\"a\":}");
        refused("{\"a\" 1}");
        refused("{a:1}");
        refused("[1,]");
        refused("{\"a\":1,}");
        refused("01");
        refused("-");
        refused("1.");
        refused("1e");
        refused(".5");
        refused("+1");
        refused("tru");
        refused("nul");
        refused("\"a\tb\"");
        refused("\"\\x\"");
        refused("'a'");
        refused("1e999");
    }

    public void testNesting() throws Exception {
        String ok = "[".repeat(Json.MAX_DEPTH) + "]".repeat(Json.MAX_DEPTH);
        Check.isTrue(parse(ok) instanceof List, "nesting at the limit");
        Check.contains(refused("[".repeat(Json.MAX_DEPTH + 1) + "]".repeat(Json.MAX_DEPTH + 1)), "nested deeper",
                "nesting over the limit");
        Check.contains(refused("{\"a\":".repeat(100_000) + "1" + "}".repeat(100_000)), "nested deeper",
                "deep objects refused, no stack overflow");
    }

    public void testWrite() throws Exception {
        Map<String, Object> m = new java.util.LinkedHashMap<>();
        m.put("s", "q\"\\\n\u0001\u2028😀");
        m.put("n", List.of(1, 2L, 2.5, 3.0));
        m.put("b", true);
        m.put("z", null);
        m.put("arr", new int[] {1, 2});
        String w = Json.write(m);
        Check.eq("{\"s\":\"q\\\"\\\\\\n\\u0001\\u2028😀\",\"n\":[1,2,2.5,3],\"b\":true,\"z\":null,\"arr\":[1,2]}", w, "written");
        Map<?, ?> back = (Map<?, ?>) Json.parse(w);
        Check.eq(m.get("s"), back.get("s"), "round trip");
        Check.eq("\"\uFFFD\"", Json.write("\ud800"), "a lone surrogate is written as U+FFFD");
    }

    public void testCompactKeepsText() throws Exception {
        Check.eq("{\"a\":1e3,\"b\":\" x \\\" \",\"c\":[1,2]}", Json.compact("{ \"a\" : 1e3 ,\n \"b\": \" x \\\" \", \"c\": [1, 2] }"), "compact");
    }

    public void testRunUnknownFieldIgnoredKnownFieldChecked() throws Exception {
        RunRequest r = RunRequest.from(Json.parseCapturing(
                "{\"ticket\":\"t\",\"task\":\"k\",\"handler\":\"h\",\"attempt\":1,\"deadline\":0,\"brand_new\":{\"x\":[1]},\"params\": {\"a\" : 1e3}}",
                "params", 1));
        Check.eq("t", r.ticket(), "ticket");
        Check.eq("{\"a\":1e3}", r.paramsJson(), "params as sent, compact");
        Check.eq(1000.0, ((Map<?, ?>) r.params()).get("a"), "params parsed");
        for (String[] c : new String[][] {
                {"{\"task\":\"k\",\"attempt\":1,\"deadline\":0}", "ticket: required"},
                {"{\"ticket\":\"t\",\"attempt\":1,\"deadline\":0}", "task: required"},
                {"{\"ticket\":\"t\",\"task\":\"k\",\"deadline\":0}", "attempt: required"},
                {"{\"ticket\":\"t\",\"task\":\"k\",\"attempt\":1}", "deadline: required"},
                {"{\"ticket\":\"t\",\"task\":\"k\",\"attempt\":0,\"deadline\":0}", "attempt: must be between 1"},
                {"{\"ticket\":1,\"task\":\"k\",\"attempt\":1,\"deadline\":0}", "ticket: must be a string"},
                {"{\"ticket\":\"t\",\"task\":\"k\",\"attempt\":1.5,\"deadline\":0}", "attempt: must be an integer"},
                {"{\"ticket\":\"t\",\"task\":\"k\",\"attempt\":1,\"deadline\":\"0\"}", "deadline: must be an integer"},
                {"{\"ticket\":\"t\",\"task\":\"k\",\"attempt\":1,\"deadline\":0,\"shard\":256}", "shard: must be between 0 and 255"},
                {"{\"ticket\":\"t\",\"task\":\"k\",\"attempt\":1,\"deadline\":0,\"parallel\":1}", "parallel: must be true or false"},
                {"{\"ticket\":\"t\",\"task\":\"k\",\"attempt\":1,\"deadline\":0,\"dedup_ttl_ms\":-1}", "dedup_ttl_ms: must be between 0"},
                {"{\"ticket\":\"" + "x".repeat(257) + "\",\"task\":\"k\",\"attempt\":1,\"deadline\":0}", "ticket: longer than 256 bytes"},
                {"[]", "must be a JSON object"},
        }) {
            Check.contains(Check.throwsA(RunRequest.Invalid.class, () -> RunRequest.from(Json.parseCapturing(c[0], "params", 1)),
                    c[0]).getMessage(), c[1], c[0]);
        }
    }
}
