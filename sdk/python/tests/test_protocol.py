import unittest

import helpers  # noqa: F401  (puts the package on sys.path)
from axe_executor import InvalidMessage
from axe_executor import protocol as p

# Vectors computed with the Go protocol package (protocol.DispatchKey, protocol.SignCall,
# protocol.SignCallV2) by a throwaway program; the Python side must agree byte for byte.
TOKEN = "s3cret-token-0123456789"
KEY_HEX = "17f24e800242214b4d5f2134f7dfa1ab48644aca2861a781ac08c99114e7b779"
BODY = b'{"ticket":"t-9","task":"nightly","handler":"echo","attempt":1,"deadline":0}'
AT = 1700000000001
ADDR = "127.0.0.1:9100"
V1 = "AXE-HMAC-SHA256 t=1700000000001,sig=2bcf95c421dccea069ad6be3aa7977f8cd94168fd79a304dbee77fa9b994bbec"
V1_EPOCH5 = "AXE-HMAC-SHA256 t=1700000000001,sig=e536f841becece37e4e7919b4b8f97984eb47891514f2a153ec193b1ec1f7bcd"
INC = "inc0123456789abcdef0123456789abcd"
V2_EPOCH5 = "ad519bbda3be461de73ec5a275bbf4735d00ea20827df9209f389e482c4653ae"
UNICODE_KEY_HEX = "1599a636ce04a6c2bd4fe5e7db93d0c6f06effb964e3710f8091cc2df1c31ba0"


class SignatureVectors(unittest.TestCase):
    def test_key_derivation_matches_go(self):
        self.assertEqual(p.dispatch_key(TOKEN).hex(), KEY_HEX)
        self.assertEqual(p.dispatch_key("ünïcode-tøken-xxxxxxxx").hex(), UNICODE_KEY_HEX)
        self.assertEqual(len(p.dispatch_key(TOKEN)), 32)

    def test_v1_matches_go(self):
        key = p.dispatch_key(TOKEN)
        self.assertEqual(p.sign_call(key, AT, ADDR, "/axe/run", "", BODY), V1)
        self.assertEqual(p.sign_call(key, AT, ADDR, "/axe/run", "5", BODY), V1_EPOCH5)

    def test_v2_matches_go(self):
        key = p.dispatch_key(TOKEN)
        self.assertEqual(p.signature(key, AT, ADDR, "/axe/run", "5", BODY, INC), V2_EPOCH5)
        h = p.sign_call(key, AT, ADDR, "/axe/run", "5", BODY, incarnation=INC)
        self.assertEqual(h, "AXE-HMAC-SHA256 t=1700000000001,sig=" + V2_EPOCH5)
        self.assertIsNone(p.verify_call(key, h, ADDR, "/axe/run", "5", BODY, INC, now=AT + 1000))

    def test_known_answers_of_docs_protocol(self):
        # docs/protocol.md, "Known answers, to check an implementation in another language".
        key = p.dispatch_key("exec-token")
        self.assertEqual(key.hex(), "a2042d7328aaf0811706284b29fbe1392857da6edefce919969a61c301220742")
        args = (key, 1700000000000, "10.0.0.7:9100", "/axe/run", "5", b'{"ticket":"t-1"}')
        self.assertEqual(p.signature(*args), "f7492a3a2d38ece67530fd171e430196285a8e863ccfdeaeb1ab192940e1487e")
        self.assertEqual(p.signature(*args, incarnation="0123456789abcdef0123456789abcdef"),
                         "f425c2c9908c3a889a8710a4fe2decf21b0c481cc671622ee9cc15970bb6df9d")

    def test_verify_refuses_every_change(self):
        key = p.dispatch_key(TOKEN)
        h = p.sign_call(key, AT, ADDR, "/axe/run", "5", BODY, incarnation=INC)
        now = AT + 10
        cases = {
            "body": (key, h, ADDR, "/axe/run", "5", BODY + b" ", INC),
            "address": (key, h, "127.0.0.1:9101", "/axe/run", "5", BODY, INC),
            "path": (key, h, ADDR, "/axe/kill", "5", BODY, INC),
            "epoch": (key, h, ADDR, "/axe/run", "", BODY, INC),
            "incarnation": (key, h, ADDR, "/axe/run", "5", BODY, INC[:-1] + "e"),
            "key": (p.dispatch_key(TOKEN + "x"), h, ADDR, "/axe/run", "5", BODY, INC),
            "v1 message": (key, h, ADDR, "/axe/run", "5", BODY, None),
            "upper-case hex": (key, h.upper().replace("AXE-HMAC-SHA256 T=", "AXE-HMAC-SHA256 t=").replace(",SIG=", ",sig="),
                               ADDR, "/axe/run", "5", BODY, INC),
            "leading zero": (key, h.replace("t=1", "t=01"), ADDR, "/axe/run", "5", BODY, INC),
            "missing": (key, None, ADDR, "/axe/run", "5", BODY, INC),
            "bearer": (key, "Bearer " + TOKEN, ADDR, "/axe/run", "5", BODY, INC),
        }
        for name, args in cases.items():
            with self.subTest(name):
                self.assertIsNotNone(p.verify_call(*args, now=now))

    def test_skew(self):
        key = p.dispatch_key(TOKEN)
        h = p.sign_call(key, AT, ADDR, "/axe/run", "", BODY, incarnation=INC)
        self.assertIsNone(p.verify_call(key, h, ADDR, "/axe/run", "", BODY, INC, now=AT + p.SIGNATURE_SKEW_MS))
        self.assertIsNone(p.verify_call(key, h, ADDR, "/axe/run", "", BODY, INC, now=AT - p.SIGNATURE_SKEW_MS))
        late = p.verify_call(key, h, ADDR, "/axe/run", "", BODY, INC, now=AT + p.SIGNATURE_SKEW_MS + 1)
        self.assertIn("clock", late)
        self.assertFalse(p.plausible(h, now=AT - p.SIGNATURE_SKEW_MS - 1))
        self.assertTrue(p.plausible(h, now=AT))


class Decoding(unittest.TestCase):
    def test_unknown_fields_ignored(self):
        r = p.decode_run(b'{"ticket":"a","task":"t","attempt":2,"deadline":5,"handler":"h",'
                         b'"group":"g","kind":"cron","future_field":{"x":[1,2]},"another":null}')
        self.assertEqual((r.ticket, r.task, r.attempt, r.deadline, r.handler, r.group, r.kind),
                         ("a", "t", 2, 5, "h", "g", "cron"))

    def test_dedup_ttl_held_to_30_days(self):
        r = p.decode_run(b'{"ticket":"a","task":"t","attempt":1,"deadline":0,"dedup_ttl_ms":99999999999}')
        self.assertEqual(r.dedup_ttl_ms, p.MAX_DEDUP_TTL_MS)

    def test_null_is_the_zero_value(self):
        r = p.decode_run(b'{"ticket":"a","task":"t","attempt":1,"deadline":0,"handler":null,"epoch":null,'
                         b'"shard":null,"parallel":null,"params":null,"dedup_ttl_ms":null}')
        self.assertEqual((r.handler, r.epoch, r.shard, r.parallel, r.params), ("", 0, None, False, None))

    def test_defaults(self):
        r = p.decode_run(b'{"ticket":"a","task":"t","attempt":1,"deadline":0}')
        self.assertEqual((r.handler, r.params, r.dedup_ttl_ms, r.epoch, r.shard, r.parallel), ("", None, 0, 0, None, False))

    def test_refused(self):
        ok = '"ticket":"a","task":"t","attempt":1,"deadline":0'
        cases = {
            "repeated key": (b'{"ticket":"a","ticket":"b","task":"t","attempt":1,"deadline":0}', "repeated key"),
            "repeated nested key": (('{%s,"params":{"x":1,"x":2}}' % ok).encode(), "repeated key"),
            "repeated key in unknown": (('{%s,"new":[{"k":1,"k":1}]}' % ok).encode(), "repeated key"),
            "invalid utf-8": (('{%s,"params":"' % ok).encode() + b'\xff"}', "params: invalid UTF-8"),
            "invalid utf-8 in task": (b'{"ticket":"a","task":"\xfft","attempt":1,"deadline":0}', "task: invalid UTF-8"),
            "invalid utf-8 outside strings": (b'{"ticket":"a"\xff}', "invalid UTF-8"),
            "lone surrogate": (('{%s,"params":["\\ud800"]}' % ok).encode(), "params: invalid UTF-8 or a lone surrogate"),
            "lone surrogate key": (('{%s,"\\udc00":1}' % ok).encode(), "surrogate"),
            "NaN": (('{%s,"params":NaN}' % ok).encode(), "NaN"),
            "trailing data": (('{%s} {}' % ok).encode(), "malformed"),
            "array": (b'[1]', "object"),
            "empty": (b'', "malformed"),
            "ticket missing": (b'{"task":"t","attempt":1,"deadline":0}', "ticket: required"),
            "ticket empty": (b'{"ticket":"","task":"t","attempt":1,"deadline":0}', "ticket: required"),
            "task missing": (b'{"ticket":"a","attempt":1,"deadline":0}', "task: required"),
            "attempt missing": (b'{"ticket":"a","task":"t","deadline":0}', "attempt: required"),
            "attempt zero": (b'{"ticket":"a","task":"t","attempt":0,"deadline":0}', "attempt"),
            "attempt float": (b'{"ticket":"a","task":"t","attempt":1.0,"deadline":0}', "attempt: must be an integer"),
            "attempt bool": (b'{"ticket":"a","task":"t","attempt":true,"deadline":0}', "attempt: must be an integer"),
            "deadline missing": (b'{"ticket":"a","task":"t","attempt":1}', "deadline: required"),
            "deadline string": (b'{"ticket":"a","task":"t","attempt":1,"deadline":"5"}', "deadline"),
            "ticket number": (b'{"ticket":5,"task":"t","attempt":1,"deadline":0}', "ticket: must be a string"),
            "ticket too long": (('{"ticket":"%s","task":"t","attempt":1,"deadline":0}' % ("x" * 257)).encode(), "ticket: longer"),
            "shard": (('{%s,"shard":256}' % ok).encode(), "shard"),
            "epoch": (('{%s,"epoch":-1}' % ok).encode(), "epoch"),
            "dedup": (('{%s,"dedup_ttl_ms":-1}' % ok).encode(), "dedup_ttl_ms"),
            "attempt null": (b'{"ticket":"a","task":"t","attempt":null,"deadline":0}', "attempt: required"),
            "parallel": (('{%s,"parallel":"yes"}' % ok).encode(), "parallel"),
        }
        for name, (body, want) in cases.items():
            with self.subTest(name):
                with self.assertRaises(InvalidMessage) as cm:
                    p.decode_run(body)
                self.assertIn(want, str(cm.exception))

    def test_runs_batch(self):
        runs = p.decode_runs(b'{"runs":[{"ticket":"a","task":"t","attempt":1,"deadline":0},'
                             b'{"ticket":"b"},null,{"ticket":"c","task":"t","attempt":1,"deadline":0,"x":1}],"y":2}')
        self.assertEqual(runs[0].ticket, "a")
        self.assertIsInstance(runs[1], InvalidMessage)
        self.assertIsInstance(runs[2], InvalidMessage)
        self.assertEqual(runs[3].ticket, "c")
        for body, want in ((b'{"runs":[]}', "one or more"), (b'{}', "runs: required"), (b'{"runs":{}}', "array"),
                           (('{"runs":[%s]}' % ",".join(["{}"] * 1001)).encode(), "at most 1000"),
                           (b'{"runs":[{"a":1,"a":2}]}', "repeated key")):
            with self.subTest(want):
                with self.assertRaises(InvalidMessage) as cm:
                    p.decode_runs(body)
                self.assertIn(want, str(cm.exception))

    def test_kill(self):
        k = p.decode_kill(b'{"ticket":"a","epoch":3,"shard":7,"why":"new field"}')
        self.assertEqual((k.ticket, k.epoch, k.shard), ("a", 3, 7))
        with self.assertRaises(InvalidMessage):
            p.decode_kill(b'{"epoch":3}')

    def test_header_epoch(self):
        self.assertEqual(p.header_epoch(None, 4), 4)
        self.assertEqual(p.header_epoch("5", 0), 5)
        self.assertEqual(p.header_epoch("5", 5), 5)
        for raw, body in (("-1", 0), ("x", 0), ("5", 4), ("99999999999999999999", 0)):
            with self.assertRaises(InvalidMessage):
                p.header_epoch(raw, body)

    def test_clip_and_tail(self):
        s = "é" * 10  # 20 bytes
        self.assertEqual(p.tail(s, 5), "éé")
        self.assertEqual(p.clip_error(s, 5), "éé")
        self.assertEqual(p.tail("abc", 5), "abc")
        self.assertEqual(p.tail("a\ud800b", 10), "a\ufffdb")


if __name__ == "__main__":
    unittest.main()
