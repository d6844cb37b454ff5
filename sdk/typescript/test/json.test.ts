import * as assert from "node:assert/strict";
import { test } from "node:test";
import { FieldError, MAX_DEPTH, compactText, decodeUTF8, firstInvalidUTF8, parseStrict, scan, toValue } from "../src/json.js";
import { decodeKill, decodeRun, decodeRuns } from "../src/protocol.js";

const enc = (s: string) => Buffer.from(s, "utf8");

function refused(fn: () => unknown, field: string, words: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    if (!(err instanceof FieldError)) assert.fail(`not a FieldError: ${String(err)}`);
    assert.equal(err.field, field);
    assert.match(err.message, words);
    return true;
  });
}

test("scan reads what JSON.parse reads, for valid documents", () => {
  for (const doc of [
    `{}`, `[]`, `0`, `-0`, `1.5e-3`, `-12E+4`, `"a\\"b\\\\c\\/\\b\\f\\n\\r\\t"`, `"\\u00e9\\ud83d\\ude00"`, `true`, `false`, `null`,
    ` { "a" : [ 1 , 2 , { "b" : null } ] , "c" : "x" } `, `{"__proto__": {"x": 1}}`, `"é✓😀"`,
  ]) {
    assert.deepEqual(toValue(scan(doc)), JSON.parse(doc), doc);
  }
});

test("a __proto__ member is data, not a prototype", () => {
  const v = toValue(scan(`{"__proto__": {"polluted": 1}}`)) as Record<string, unknown>;
  assert.equal(Object.getPrototypeOf(v), Object.prototype);
  assert.deepEqual(Object.keys(v), ["__proto__"]);
  assert.equal(({} as any).polluted, undefined);
});

test("a repeated key is refused in any object, naming it", () => {
  refused(() => scan(`{"a":1,"a":2}`), "a", /repeated key/);
  refused(() => scan(`{"params":{"x":{"y":1,"y":1}}}`), "params.x.y", /repeated key/);
  refused(() => scan(`{"runs":[{"ticket":"a"},{"ticket":"b","ticket":"c"}]}`), "runs[1].ticket", /repeated key/);
  // Keys equal after unescaping are the same key.
  refused(() => scan(`{"a":1,"\\u0061":2}`), "a", /repeated key/);
});

test("lone surrogate escapes are refused; pairs are one character", () => {
  refused(() => scan(`{"s":"\\ud800"}`), "s", /lone UTF-16 surrogate/);
  refused(() => scan(`{"s":"\\udc00\\ud800"}`), "s", /lone UTF-16 surrogate/);
  refused(() => scan(`{"s":"\\ud800\\u0041"}`), "s", /lone UTF-16 surrogate/);
  refused(() => scan(`{"s":"x\\ud83d"}`), "s", /lone UTF-16 surrogate/);
  refused(() => scan(`{"k\\udfff":1}`), "", /lone UTF-16 surrogate/);
  assert.equal(toValue(scan(`"\\ud83d\\ude00"`)), "😀");
});

test("invalid UTF-8 is refused, and a byte order mark is not skipped", () => {
  for (const bytes of [[0x22, 0xff, 0x22], [0x22, 0xc3, 0x22], [0x22, 0xed, 0xa0, 0x80, 0x22], [0x22, 0xc0, 0xaf, 0x22]]) {
    refused(() => decodeUTF8(Uint8Array.from(bytes)), "", /invalid UTF-8/);
  }
  refused(() => parseStrict(Uint8Array.from([0xef, 0xbb, 0xbf, 0x7b, 0x7d])), "", /invalid JSON/);
});

test("invalid UTF-8 in a string names its field", () => {
  const body = (pre: string, bad: number[], post: string) => Uint8Array.from([...enc(pre), ...bad, ...enc(post)]);
  refused(() => parseStrict(body(`{"ticket":"a","task":"x`, [0xff], `y"}`)), "task", /invalid UTF-8 in a string/);
  refused(() => parseStrict(body(`{"params":{"list":["ok","é`, [0xc3], `"]}}`)), "params.list[1]", /invalid UTF-8 in a string/);
  refused(() => parseStrict(body(`{"a`, [0xed, 0xa0, 0x80], `":1}`)), "", /invalid UTF-8 in a string/);
  refused(() => parseStrict(body(`{"a":1,`, [0xfe], `}`)), "", /invalid JSON at character 7/);
  assert.equal(firstInvalidUTF8(enc("é✓😀")), enc("é✓😀").length);
  assert.equal(firstInvalidUTF8(Uint8Array.from([0x61, 0xf0, 0x9f, 0x98])), 1);
  assert.equal(firstInvalidUTF8(Uint8Array.from([0x61, 0xf4, 0x90, 0x80, 0x80])), 1);
  assert.equal(firstInvalidUTF8(Uint8Array.from([0xe0, 0x80, 0x80])), 0);
});

test("syntax errors, trailing data and empty bodies are refused", () => {
  for (const [doc, words] of [
    [``, /empty body/], [`   `, /empty body/], [`{} {}`, /trailing data/], [`{}x`, /trailing data/], [`{"a":1,}`, /expected a key/],
    [`[1,]`, /expected a value/], [`{"a" 1}`, /expected ':'/], [`{'a':1}`, /expected a key/], [`01`, /trailing data/],
    [`1.`, /ends at character|expected a digit/], [`-`, /ends at character|expected a digit/], [`.5`, /expected a value/],
    [`+1`, /expected a value/], [`"a\nb"`, /control character/], [`"\\x41"`, /invalid escape/], [`"\\u12G4"`, /invalid \\u escape/],
    [`{"a":1`, /ends at character/], [`"abc`, /unterminated|ends at character/], [`NaN`, /expected a value/], [`tru`, /expected a value|ends/],
    [`[1 2]`, /expected ','/], [`{"a":1 "b":2}`, /expected ','/],
  ] as const) {
    assert.throws(() => scan(doc), (e: unknown) => e instanceof FieldError && words.test(e.message), doc);
  }
});

test("nesting is bounded", () => {
  const ok = "[".repeat(MAX_DEPTH) + "]".repeat(MAX_DEPTH);
  assert.doesNotThrow(() => scan(ok));
  refused(() => scan("[".repeat(MAX_DEPTH + 1) + "]".repeat(MAX_DEPTH + 1)), "[0][0][0]".slice(0, 0) + "[0]".repeat(MAX_DEPTH), /nested deeper/);
});

test("compactText drops whitespace between tokens only, keeping escapes and number spellings", () => {
  const text = `{ "a" : [ 1.50 , 2e3 ] , "s" : " x \\" y " , "u":"\\u00e9" }`;
  assert.equal(compactText(text, scan(text)), `{"a":[1.50,2e3],"s":" x \\" y ","u":"\\u00e9"}`);
});

test("a run: unknown fields ignored, required fields checked, types and ranges checked", () => {
  const base = { ticket: "t1", task: "job", attempt: 1, deadline: 0 };
  const r = decodeRun(enc(JSON.stringify({ ...base, handler: "echo", a_field_of_tomorrow: { nested: [1] }, params: { x: 1 } })));
  assert.equal(r.ticket, "t1");
  assert.equal(r.handler, "echo");
  assert.deepEqual(r.params, { x: 1 });
  assert.equal(r.paramsJSON, `{"x":1}`);
  assert.equal(r.shard, undefined);
  assert.equal(decodeRun(enc(JSON.stringify({ ...base, params: null }))).params, undefined);
  for (const f of ["ticket", "task", "attempt", "deadline"]) {
    const body: Record<string, unknown> = { ...base };
    delete body[f];
    refused(() => decodeRun(enc(JSON.stringify(body))), f, /required/);
  }
  refused(() => decodeRun(enc(JSON.stringify({ ...base, ticket: "" }))), "ticket", /required/);
  refused(() => decodeRun(enc(JSON.stringify({ ...base, attempt: 0 }))), "attempt", /between 1/);
  refused(() => decodeRun(enc(JSON.stringify({ ...base, attempt: "1" }))), "attempt", /integer, got string/);
  refused(() => decodeRun(enc(`{"ticket":"t","task":"j","attempt":1.0,"deadline":0}`)), "attempt", /integer/);
  refused(() => decodeRun(enc(`{"ticket":"t","task":"j","attempt":1e0,"deadline":0}`)), "attempt", /integer/);
  refused(() => decodeRun(enc(JSON.stringify({ ...base, deadline: -1 }))), "deadline", /between 0/);
  refused(() => decodeRun(enc(JSON.stringify({ ...base, shard: 256 }))), "shard", /between 0 and 255/);
  refused(() => decodeRun(enc(JSON.stringify({ ...base, shard: -1 }))), "shard", /between 0 and 255/);
  refused(() => decodeRun(enc(JSON.stringify({ ...base, epoch: -3 }))), "epoch", /between 0/);
  refused(() => decodeRun(enc(JSON.stringify({ ...base, parallel: "yes" }))), "parallel", /bool/);
  assert.equal(decodeRun(enc(JSON.stringify({ ...base, dedup_ttl_ms: 31 * 24 * 3600 * 1000 }))).dedupTtlMs, 30 * 24 * 3600 * 1000);
  refused(() => decodeRun(enc(JSON.stringify({ ...base, dedup_ttl_ms: -1 }))), "dedup_ttl_ms", /between 0/);
  refused(() => decodeRun(enc(JSON.stringify({ ...base, ticket: "é".repeat(129) }))), "ticket", /longer than 256 bytes/);
  refused(() => decodeRun(enc(JSON.stringify({ ...base, handler: 7 }))), "handler", /string, got number/);
  refused(() => decodeRun(enc(`[1]`)), "", /must be a JSON object, got array/);
  refused(() => decodeRun(enc(`{"ticket":"t","task":"j","attempt":1,"deadline":0,"attempt":2}`)), "attempt", /repeated key/);
});

test("a batch: refused whole when not a batch, run by run otherwise", () => {
  refused(() => decodeRuns(enc(`{}`)), "runs", /required/);
  refused(() => decodeRuns(enc(`{"runs":[]}`)), "runs", /required/);
  refused(() => decodeRuns(enc(`{"runs":{}}`)), "runs", /array/);
  refused(() => decodeRuns(enc(JSON.stringify({ runs: Array(1001).fill({}) }))), "runs", /at most 1000/);
  refused(() => decodeRuns(enc(`{"runs":[{"ticket":"a","ticket":"b"}]}`)), "runs[0].ticket", /repeated key/);
  const got = decodeRuns(enc(JSON.stringify({ runs: [{ ticket: "a", task: "t", attempt: 1, deadline: 0 }, 5, { ticket: "b" }], extra: 1 })));
  assert.equal(got.length, 3);
  assert.ok(!(got[0] instanceof FieldError));
  assert.ok(got[1] instanceof FieldError && /object, got number/.test(got[1].message));
  assert.ok(got[2] instanceof FieldError && got[2].field === "task");
});

test("a kill", () => {
  assert.deepEqual(decodeKill(enc(`{"ticket":"t","epoch":5,"shard":7,"reason":"new"}`)), { ticket: "t", epoch: 5, shard: 7 });
  refused(() => decodeKill(enc(`{}`)), "ticket", /required/);
  refused(() => decodeKill(enc(`{"ticket":"t","shard":300}`)), "shard", /between 0 and 255/);
});
