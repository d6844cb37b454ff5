package io.github.axesched.executor;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The scheduler's signed calls to executors (docs/protocol.md, Authentication).
 *
 * <pre>
 * key = HMAC-SHA256(key = UTF-8 of the token, message = "axe dispatch key v1")   (raw 32 bytes)
 * v2:  sig = hex(HMAC-SHA256(key, "axe-dispatch-v2\n" + t + "\n" + address + "\n" + path + "\n"
 *                              + epoch + "\n" + incarnation + "\n" + body))
 * v1:  the same without the incarnation line, labelled "axe-dispatch-v1"
 * Authorization: AXE-HMAC-SHA256 t=&lt;unix ms&gt;,sig=&lt;64 lower-case hex&gt;
 * </pre>
 */
public final class Signatures {
    /** The scheme that starts the Authorization header of a signed call. */
    public static final String SCHEME = "AXE-HMAC-SHA256";
    /** How far, either way, the time of a signed call may be from the executor's clock. */
    public static final long SKEW_MS = 5 * 60 * 1000L;
    /** The error text of every refused signature. */
    public static final String BAD_SIGNATURE = "missing or invalid scheduler signature";

    /** Added to {@link #BAD_SIGNATURE} for a call validly signed for another incarnation. */
    public static final String OTHER_INCARNATION = "signed for another incarnation of this executor";

    private static final String PREFIX = SCHEME + " t=";

    private Signatures() {}

    /** The dispatch key derived from an executor token: the raw HMAC digest. */
    public static byte[] dispatchKey(String token) {
        return hmac(token.getBytes(StandardCharsets.UTF_8), "axe dispatch key v1".getBytes(StandardCharsets.UTF_8), null);
    }

    /**
     * The signature of one call, as raw bytes. incarnation null selects the v1 message (an
     * executor registered without an incarnation).
     */
    public static byte[] signature(byte[] key, long t, String address, String path, String epoch,
            String incarnation, byte[] body) {
        String head = incarnation == null
                ? "axe-dispatch-v1\n" + t + "\n" + address + "\n" + path + "\n" + epoch + "\n"
                : "axe-dispatch-v2\n" + t + "\n" + address + "\n" + path + "\n" + epoch + "\n" + incarnation + "\n";
        return hmac(key, head.getBytes(StandardCharsets.UTF_8), body);
    }

    /** The Authorization header value of a call signed at t (Unix ms). */
    public static String sign(byte[] key, long t, String address, String path, String epoch,
            String incarnation, byte[] body) {
        return PREFIX + t + ",sig=" + hex(signature(key, t, address, path, epoch, incarnation, body));
    }

    /** A parsed Authorization header of the signed scheme. */
    record Parsed(long t, byte[] sig) {}

    /** Parses the header, accepting only the canonical form {@link #sign} writes; null if not. */
    static Parsed parse(String header) {
        if (header == null || !header.startsWith(PREFIX)) {
            return null;
        }
        String rest = header.substring(PREFIX.length());
        int comma = rest.indexOf(",sig=");
        if (comma <= 0 || comma > 19) {
            return null;
        }
        String ts = rest.substring(0, comma);
        String hexSig = rest.substring(comma + 5);
        if (hexSig.length() != 64) {
            return null;
        }
        long t;
        try {
            t = Long.parseLong(ts);
        } catch (NumberFormatException e) {
            return null;
        }
        if (t < 0 || !Long.toString(t).equals(ts)) {
            return null;
        }
        byte[] sig = new byte[32];
        for (int i = 0; i < 32; i++) {
            int hi = lowerHex(hexSig.charAt(2 * i));
            int lo = lowerHex(hexSig.charAt(2 * i + 1));
            if (hi < 0 || lo < 0) {
                return null;
            }
            sig[i] = (byte) (hi << 4 | lo);
        }
        return new Parsed(t, sig);
    }

    private static int lowerHex(char c) {
        if (c >= '0' && c <= '9') {
            return c - '0';
        }
        if (c >= 'a' && c <= 'f') {
            return c - 'a' + 10;
        }
        return -1;
    }

    static boolean fresh(long t, long nowMs) {
        long d = nowMs - t;
        return d <= SKEW_MS && d >= -SKEW_MS;
    }

    /** Whether the header is a well-formed signature of a time near now: judged before the body is read. */
    public static boolean plausible(String header, long nowMs) {
        Parsed p = parse(header);
        return p != null && fresh(p.t(), nowMs);
    }

    /**
     * Verifies a call; returns null when it verifies, else the reason (starting with
     * {@link #BAD_SIGNATURE}).
     */
    public static String verify(byte[] key, String header, String address, String path, String epoch,
            String incarnation, byte[] body, long nowMs) {
        Parsed p = parse(header);
        if (p == null) {
            return BAD_SIGNATURE;
        }
        if (!fresh(p.t(), nowMs)) {
            return BAD_SIGNATURE + ": the call was signed more than 5m0s away from this executor's clock: check both clocks";
        }
        if (!MessageDigest.isEqual(p.sig(), signature(key, p.t(), address, path, epoch, incarnation, body))) {
            return BAD_SIGNATURE;
        }
        return null;
    }

    static String hex(byte[] b) {
        char[] out = new char[b.length * 2];
        final char[] digits = "0123456789abcdef".toCharArray();
        for (int i = 0; i < b.length; i++) {
            out[2 * i] = digits[(b[i] >> 4) & 0xf];
            out[2 * i + 1] = digits[b[i] & 0xf];
        }
        return new String(out);
    }

    private static byte[] hmac(byte[] key, byte[] head, byte[] body) {
        try {
            Mac m = Mac.getInstance("HmacSHA256");
            // SecretKeySpec refuses an empty array; HMAC pads keys with zero bytes, so one zero
            // byte is the same key as none.
            m.init(new SecretKeySpec(key.length == 0 ? new byte[1] : key, "HmacSHA256"));
            m.update(head);
            if (body != null) {
                m.update(body);
            }
            return m.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is not available", e);
        }
    }
}
