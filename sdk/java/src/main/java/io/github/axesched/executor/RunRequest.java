package io.github.axesched.executor;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * One run as the scheduler sends it to /axe/run (or inside /axe/runs), checked: required fields
 * present, known fields of their type and within their range; unknown fields ignored
 * (protocol v2 §1).
 */
record RunRequest(String ticket, String task, String handler, String group, String kind, int attempt,
        long scheduledAt, long deadline, Object params, String paramsJson, long dedupTtlMs, long epoch,
        Integer shard, boolean parallel) {

    static final int MAX_NAME_BYTES = 256;
    static final long MAX_DEDUP_TTL_MS = 30L * 24 * 3600 * 1000;
    static final int SHARD_COUNT = 256;

    /** A run or kill that is malformed; the message names the field. */
    static final class Invalid extends Exception {
        private static final long serialVersionUID = 1L;

        Invalid(String message) {
            super(message);
        }
    }

    /** Checks a parsed run (its params captured with their source text). */
    static RunRequest from(Object v) throws Invalid {
        if (!(v instanceof Map<?, ?> m)) {
            throw new Invalid("invalid run: must be a JSON object");
        }
        Object params = null;
        String paramsJson = null;
        Object p = m.get("params");
        if (p instanceof Json.Captured c) {
            params = c.value();
            paramsJson = c.value() == null ? null : Json.compact(c.raw());
        } else if (p != null) {
            params = p;
            paramsJson = Json.write(p);
        }
        long attempt = integer(m, "attempt", true, 1, Integer.MAX_VALUE);
        return new RunRequest(
                name(m, "ticket", true), name(m, "task", true), name(m, "handler", false),
                name(m, "group", false), name(m, "kind", false), (int) attempt,
                integer(m, "scheduled_at", false, 0, Long.MAX_VALUE),
                integer(m, "deadline", true, 0, Long.MAX_VALUE),
                params, paramsJson,
                Math.min(integer(m, "dedup_ttl_ms", false, 0, Long.MAX_VALUE), MAX_DEDUP_TTL_MS),
                integer(m, "epoch", false, 0, Long.MAX_VALUE),
                shard(m), bool(m, "parallel"));
    }

    static String name(Map<?, ?> m, String field, boolean required) throws Invalid {
        Object v = m.get(field);
        if (v == null) {
            if (required) {
                throw new Invalid("invalid run: " + field + ": required");
            }
            return "";
        }
        if (!(v instanceof String s)) {
            throw new Invalid("invalid run: " + field + ": must be a string");
        }
        if (required && s.isEmpty()) {
            throw new Invalid("invalid run: " + field + ": required");
        }
        if (s.getBytes(StandardCharsets.UTF_8).length > MAX_NAME_BYTES) {
            throw new Invalid("invalid run: " + field + ": longer than " + MAX_NAME_BYTES + " bytes");
        }
        return s;
    }

    static long integer(Map<?, ?> m, String field, boolean required, long min, long max) throws Invalid {
        Object v = m.get(field);
        if (v == null) {
            if (required) {
                throw new Invalid("invalid run: " + field + ": required");
            }
            return 0;
        }
        if (v instanceof BigInteger || !(v instanceof Long l)) {
            throw new Invalid("invalid run: " + field + ": must be an integer");
        }
        if (l < min || l > max) {
            throw new Invalid("invalid run: " + field + ": must be between " + min + " and " + max + ", got " + l);
        }
        return l;
    }

    static Integer shard(Map<?, ?> m) throws Invalid {
        Object v = m.get("shard");
        if (v == null) {
            return null;
        }
        if (!(v instanceof Long l)) {
            throw new Invalid("invalid run: shard: must be an integer");
        }
        if (l < 0 || l >= SHARD_COUNT) {
            throw new Invalid("invalid run: shard: must be between 0 and " + (SHARD_COUNT - 1) + ", got " + l);
        }
        return l.intValue();
    }

    static boolean bool(Map<?, ?> m, String field) throws Invalid {
        Object v = m.get(field);
        if (v == null) {
            return false;
        }
        if (!(v instanceof Boolean b)) {
            throw new Invalid("invalid run: " + field + ": must be true or false");
        }
        return b;
    }
}
