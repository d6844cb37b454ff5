package io.github.axesched.executor;

import java.nio.charset.StandardCharsets;

/**
 * Signature vectors computed with the Go side (protocol.DispatchKey, protocol.SignCall for v1,
 * protocol.SignCallV2 for v2), hard-coded so both sides must agree.
 */
public class SignaturesTest {
    static final byte[] BODY = "{\"ticket\":\"t-9\",\"task\":\"nightly\",\"handler\":\"echo\",\"attempt\":1,\"deadline\":0}"
            .getBytes(StandardCharsets.UTF_8);
    static final long T = 1700000000001L;

    public void testDispatchKeyMatchesGo() {
        Check.eq("f8b7cb45d8b570d6c9dc3ac4ba4a79c3ea193e91aa03ee599a35a66bbe7f5a51",
                Signatures.hex(Signatures.dispatchKey("s3cret-token")), "key of s3cret-token");
        Check.eq("be959e822b9db1fcf49ce457f0f154a57ef85d59d6db7c6f0d0d6596f84f3ff2",
                Signatures.hex(Signatures.dispatchKey("токен✓")), "key of a non-ASCII token");
        Check.eq("be0c4e856266b59dafd450d4f7593d29f6a0fd3c3745c8fdaaa8227963450cd4",
                Signatures.hex(Signatures.dispatchKey("")), "key of the empty token");
    }

    public void testV1MatchesGo() {
        byte[] key = Signatures.dispatchKey("s3cret-token");
        Check.eq("AXE-HMAC-SHA256 t=1700000000001,sig=49fc2282cae3b566a199cd7d16082b48ece136549785a30105aa023f81fa2c81",
                Signatures.sign(key, T, "127.0.0.1:9100", "/axe/run", "", null, BODY), "v1 run");
        Check.eq("AXE-HMAC-SHA256 t=1700000000001,sig=a6d0eed6f209c6afa9a13d38e3eb25a577ee94ded8f586a99ddd811aa7de3b7b",
                Signatures.sign(key, T, "127.0.0.1:9100", "/axe/kill", "7", null,
                        "{\"ticket\":\"t-9\"}".getBytes(StandardCharsets.UTF_8)), "v1 kill with epoch");
    }

    public void testV2MatchesGo() {
        byte[] key = Signatures.dispatchKey("s3cret-token");
        Check.eq("86d9fbf2335e80bd9cb26b2b624d319d25da734d586ef3fcb7f471baff2be122",
                Signatures.hex(Signatures.signature(key, T, "127.0.0.1:9100", "/axe/run", "",
                        "0123456789abcdef0123456789abcdef", BODY)), "v2 run");
        Check.eq("2ea6d52928142d7bdeba778229a361dc764c81f9a0087e379661320a1b400ae9",
                Signatures.hex(Signatures.signature(key, T, "127.0.0.1:9100", "/axe/runs", "5",
                        "inc_A-1234567890abcdef", "{\"runs\":[]}".getBytes(StandardCharsets.UTF_8))), "v2 runs with epoch");
    }

    public void testKnownAnswersOfTheProtocolDocument() {
        // docs/protocol.md, Authentication: "Known answers, to check an implementation in another language".
        byte[] key = Signatures.dispatchKey("exec-token");
        Check.eq("a2042d7328aaf0811706284b29fbe1392857da6edefce919969a61c301220742", Signatures.hex(key), "key");
        byte[] body = "{\"ticket\":\"t-1\"}".getBytes(StandardCharsets.UTF_8);
        Check.eq("f7492a3a2d38ece67530fd171e430196285a8e863ccfdeaeb1ab192940e1487e",
                Signatures.hex(Signatures.signature(key, 1700000000000L, "10.0.0.7:9100", "/axe/run", "5", null, body)), "v1");
        Check.eq("f425c2c9908c3a889a8710a4fe2decf21b0c481cc671622ee9cc15970bb6df9d",
                Signatures.hex(Signatures.signature(key, 1700000000000L, "10.0.0.7:9100", "/axe/run", "5",
                        "0123456789abcdef0123456789abcdef", body)), "v2");
    }

    public void testVerify() {
        byte[] key = Signatures.dispatchKey("s3cret-token");
        String inc = "0123456789abcdef0123456789abcdef";
        String h = Signatures.sign(key, T, "127.0.0.1:9100", "/axe/run", "", inc, BODY);
        Check.eq(null, Signatures.verify(key, h, "127.0.0.1:9100", "/axe/run", "", inc, BODY, T + 1000), "a good call");
        Check.eq(Signatures.BAD_SIGNATURE, Signatures.verify(key, h, "127.0.0.1:9101", "/axe/run", "", inc, BODY, T),
                "another address");
        Check.eq(Signatures.BAD_SIGNATURE, Signatures.verify(key, h, "127.0.0.1:9100", "/axe/runs", "", inc, BODY, T),
                "another path");
        Check.eq(Signatures.BAD_SIGNATURE, Signatures.verify(key, h, "127.0.0.1:9100", "/axe/run", "1", inc, BODY, T),
                "another epoch");
        Check.eq(Signatures.BAD_SIGNATURE, Signatures.verify(key, h, "127.0.0.1:9100", "/axe/run", "", inc + "x", BODY, T),
                "another incarnation");
        Check.eq(Signatures.BAD_SIGNATURE, Signatures.verify(key, h, "127.0.0.1:9100", "/axe/run", "", inc,
                "{}".getBytes(StandardCharsets.UTF_8), T), "another body");
        Check.contains(Signatures.verify(key, h, "127.0.0.1:9100", "/axe/run", "", inc, BODY, T + Signatures.SKEW_MS + 1),
                "away from this executor's clock", "a stale call");
        Check.eq(null, Signatures.verify(key, h, "127.0.0.1:9100", "/axe/run", "", inc, BODY, T - Signatures.SKEW_MS),
                "a call from 5 minutes ahead");
        Check.eq(Signatures.BAD_SIGNATURE, Signatures.verify(key, h.toUpperCase().replace("AXE-HMAC-SHA256 T=", "AXE-HMAC-SHA256 t=")
                .replace(",SIG=", ",sig="), "127.0.0.1:9100", "/axe/run", "", inc, BODY, T), "upper-case hex");
        Check.eq(Signatures.BAD_SIGNATURE, Signatures.verify(key, h.replace("t=1", "t=01"), "127.0.0.1:9100", "/axe/run", "",
                inc, BODY, T), "a non-canonical time");
        Check.eq(Signatures.BAD_SIGNATURE, Signatures.verify(key, null, "127.0.0.1:9100", "/axe/run", "", inc, BODY, T), "no header");
        Check.isTrue(Signatures.plausible(h, T), "plausible");
        Check.isTrue(!Signatures.plausible("Bearer x", T), "a bearer token is not plausible");
    }
}
