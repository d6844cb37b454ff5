import * as assert from "node:assert/strict";
import { test } from "node:test";
import { BAD_SIGNATURE, dispatchKey, parseSignature, plausibleCall, signature, signCall, verifyCall } from "../src/sign.js";

// Vectors computed by the Go side (protocol.DispatchKey and protocol.SignCallV2): the key, and
// HMAC-SHA256 under it over
// "axe-dispatch-v2\n" + t + "\n" + address + "\n" + path + "\n" + epoch + "\n" + incarnation + "\n" + body.
const keys: Array<[string, string]> = [
  ["s3cret-token-0123456789", "17f24e800242214b4d5f2134f7dfa1ab48644aca2861a781ac08c99114e7b779"],
  ["ключ-токен-✓-0123456789", "80bb9634119c2c1934cdd1a0fada16a7677730a1527a830cece503bea4bb9e45"],
  ["", "be0c4e856266b59dafd450d4f7593d29f6a0fd3c3745c8fdaaa8227963450cd4"],
];

const inc = "0123456789abcdef0123456789abcdef";
const calls: Array<[number, string, string, string, string, string, string]> = [
  [1700000000001, "127.0.0.1:9100", "/axe/run", "", inc, `{"ticket":"t-9","task":"nightly","handler":"echo","attempt":1,"deadline":0}`, "02431fd6ddd06c93aeab8fee887374d7d93fbc2a50005c113025ac0a19863c94"],
  [1700000000002, "10.0.0.7:9100", "/axe/runs", "7", "inc_A-b", `{"runs":[]}`, "cb0db41665c5a5765484ba020d3430c456c1319a0b1f3e1565da26a267d7cea9"],
  [1700000000003, "[::1]:9100", "/axe/kill", "12", inc, `{"ticket":"é✓"}`, "80934245fe725cd870a48be05fc16f6d20832bd95b1c1074a9fefdf0e24e9777"],
  [1700000000004, "127.0.0.1:9100", "/axe/beat", "", inc, ``, "ae5c1631ff98149492f931d5a04fe4e3df2f05a8d570f24cb0b7113f977812dc"],
];

test("the known answers of docs/protocol.md", () => {
  const key = dispatchKey("exec-token");
  assert.equal(key.toString("hex"), "a2042d7328aaf0811706284b29fbe1392857da6edefce919969a61c301220742");
  const call = { address: "10.0.0.7:9100", path: "/axe/run", epoch: "5", incarnation: "0123456789abcdef0123456789abcdef", body: Buffer.from(`{"ticket":"t-1"}`) };
  assert.equal(signature(key, 1700000000000, call).toString("hex"), "f425c2c9908c3a889a8710a4fe2decf21b0c481cc671622ee9cc15970bb6df9d");
});

test("the dispatch key agrees with the Go side", () => {
  for (const [token, hex] of keys) assert.equal(dispatchKey(token).toString("hex"), hex, token);
});

test("version 2 signatures agree with the Go side", () => {
  const key = dispatchKey("s3cret-token-0123456789");
  for (const [t, address, path, epoch, incarnation, body, want] of calls) {
    const call = { address, path, epoch, incarnation, body: Buffer.from(body, "utf8") };
    assert.equal(signature(key, t, call).toString("hex"), want, path);
    const header = signCall(key, t, call);
    assert.equal(header, `AXE-HMAC-SHA256 t=${t},sig=${want}`);
    assert.equal(verifyCall(key, header, call, t + 1000), undefined);
  }
});

test("verifyCall refuses any change, a stale time and a malformed header", () => {
  const key = dispatchKey("s3cret-token-0123456789");
  const [t, address, path, epoch, incarnation, body] = calls[0]!;
  const call = { address, path, epoch, incarnation, body: Buffer.from(body, "utf8") };
  const header = signCall(key, t, call);
  const changed = [
    { ...call, address: "127.0.0.1:9101" }, { ...call, path: "/axe/runs" }, { ...call, epoch: "1" },
    { ...call, incarnation: "fedcba9876543210fedcba9876543210" }, { ...call, body: Buffer.from(body + " ") },
  ];
  for (const c of changed) assert.equal(verifyCall(key, header, c, t), BAD_SIGNATURE);
  assert.equal(verifyCall(dispatchKey("another-token-0123456789"), header, call, t), BAD_SIGNATURE);
  assert.match(verifyCall(key, header, call, t + 5 * 60 * 1000 + 1)!, /clock/);
  assert.match(verifyCall(key, header, call, t - 5 * 60 * 1000 - 1)!, /clock/);
  assert.equal(verifyCall(key, header, call, t + 5 * 60 * 1000), undefined);
  for (const h of [
    undefined, "", header.toUpperCase(), header.replace("sig=", "sig=0"), header.replace(`t=${t}`, `t=0${t}`),
    header.replace(`t=${t}`, `t=+${t}`), `Bearer s3cret-token-0123456789`, header + " ", header.replace(/sig=[0-9a-f]{2}/, "sig=AB"),
  ]) {
    assert.equal(verifyCall(key, h, call, t), BAD_SIGNATURE, String(h));
    assert.equal(parseSignature(h) === undefined || h === header, true);
  }
});

test("plausibleCall judges the header alone", () => {
  const now = 1_700_000_000_000;
  assert.equal(plausibleCall(`AXE-HMAC-SHA256 t=${now},sig=${"0".repeat(64)}`, now), true);
  assert.equal(plausibleCall(`AXE-HMAC-SHA256 t=${now - 6 * 60 * 1000},sig=${"0".repeat(64)}`, now), false);
  assert.equal(plausibleCall(`AXE-HMAC-SHA256 t=${now},sig=${"0".repeat(63)}`, now), false);
  assert.equal(plausibleCall(undefined, now), false);
});
