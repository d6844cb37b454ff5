// The executor against a scheduler that speaks the protocol over real HTTP on loopback.

import * as assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { DeadlineError, type DedupStore, Executor, type FinishedRun, KilledError, ShutdownError, silentLogger } from "../src/index.js";
import { FakeScheduler, TOKEN, call, run, startExecutor, waitFor } from "./helpers.js";

describe("registration, heartbeats, deregistration", () => {
  test("registers with version 2, its incarnation and signed auth; heartbeats carry the incarnation", async () => {
    const s = await FakeScheduler.start();
    const ex = await startExecutor(s, { heartbeatIntervalMs: 20 });
    try {
      const [reg] = s.on("/api/v1/executors/register");
      assert.deepEqual(reg, {
        app: "test", address: ex.address, protocol: "http", handlers: ["echo"], auth: "signed", version: 2, incarnation: ex.incarnation,
      });
      assert.match(ex.incarnation, /^[0-9a-f]{32}$/);
      assert.equal(s.calls[0]!.auth, `Bearer ${TOKEN}`);
      const hb = await waitFor("a heartbeat", () => s.on("/api/v1/executors/heartbeat")[0]);
      assert.deepEqual(hb, { app: "test", address: ex.address, running: 0, incarnation: ex.incarnation });
    } finally {
      await ex.stop();
      await s.stop();
    }
  });

  test("a heartbeat answered 404 registers again", async () => {
    const s = await FakeScheduler.start((path, n) => (path === "/api/v1/executors/heartbeat" && n === 0 ? [404, { error: "unknown executor" }] : undefined));
    const ex = await startExecutor(s, { heartbeatIntervalMs: 20 });
    try {
      await waitFor("a second registration", () => s.on("/api/v1/executors/register").length >= 2);
      const regs = s.on("/api/v1/executors/register");
      assert.equal(regs[1].incarnation, ex.incarnation);
    } finally {
      await ex.stop();
      await s.stop();
    }
  });

  test("a refused token or registration fails start()", async () => {
    for (const [status, name] of [[401, "UnauthorizedError"], [403, "UnauthorizedError"], [400, "RegistrationRejectedError"]] as const) {
      const s = await FakeScheduler.start((path) => (path === "/api/v1/executors/register" ? [status, { error: "no" }] : undefined));
      await assert.rejects(startExecutor(s), (e: Error) => e.name === name);
      await s.stop();
    }
  });

  test("an unreachable scheduler is no failure at start: registration is retried", async () => {
    const s = await FakeScheduler.start((path, n) => (path === "/api/v1/executors/register" && n < 2 ? [503, { error: "starting" }] : undefined));
    const ex = await startExecutor(s, { heartbeatIntervalMs: 20 });
    try {
      await waitFor("a registration that succeeds", () => s.on("/api/v1/executors/register").length >= 3);
    } finally {
      await ex.stop();
      await s.stop();
    }
  });

  test("stop() refuses new runs with 503, deregisters, drains the running ones and delivers their results", async () => {
    const s = await FakeScheduler.start();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const ex = await startExecutor(s, { heartbeatIntervalMs: 20 }, { echo: async () => { await gate; return "drained"; } });
    const body = run();
    const ticket = JSON.parse(body).ticket;
    assert.equal((await call(ex, "/axe/run", body)).status, 202);
    const stopped = ex.stop();
    await waitFor("the deregistration", () => s.on("/api/v1/executors/deregister")[0]);
    assert.deepEqual(s.on("/api/v1/executors/deregister")[0], { app: "test", address: ex.address, incarnation: ex.incarnation });
    const refused = await call(ex, "/axe/run", run());
    assert.equal(refused.status, 503);
    assert.equal(refused.body.error, "executor is stopping");
    // It still heartbeats while it drains, so its runs in flight are not declared lost.
    const beats = s.on("/api/v1/executors/heartbeat").length;
    await waitFor("a heartbeat during the drain", () => s.on("/api/v1/executors/heartbeat").length > beats);
    release();
    await stopped;
    assert.equal(s.resultOf(ticket)?.output, "drained");
    await s.stop();
  });
});

test("stop() that runs out of time aborts the handlers' signals with ShutdownError and rejects", async () => {
  const s = await FakeScheduler.start();
  let reason: unknown;
  const ex = await startExecutor(s, {}, {
    stuck: (ctx) => new Promise((_, reject) => ctx.signal.addEventListener("abort", () => {
      reason = ctx.signal.reason;
      reject(ctx.signal.reason);
    })),
  });
  try {
    assert.equal((await call(ex, "/axe/run", run({ handler: "stuck" }))).status, 202);
    await waitFor("the handler to run", () => ex.inflight === 1);
    await assert.rejects(ex.stop(200), /cannot stop gracefully: 200 ms passed while waiting for runs/);
    assert.ok(reason instanceof ShutdownError, String(reason));
    assert.equal(s.on("/api/v1/executors/deregister").length, 1);
  } finally {
    await s.stop();
  }
});

describe("one executor", () => {
  let s: FakeScheduler;
  let ex: Executor;
  const gates = new Map<string, () => void>();
  const seen: Array<{ ticket: string; attempt: number }> = [];

  before(async () => {
    s = await FakeScheduler.start();
    ex = await startExecutor(s, {}, {
      echo: async (ctx) => {
        seen.push({ ticket: ctx.ticket, attempt: ctx.attempt });
        return ctx.paramsJSON ?? "{}";
      },
      // Waits until released, or until its signal aborts (then fails with the reason).
      wait: (ctx) => new Promise((resolve, reject) => {
        gates.set(ctx.ticket, () => resolve(`released ${ctx.ticket}`));
        ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason));
      }),
      value: async (ctx) => (ctx.params as any).v,
      boom: async () => { throw new Error("it broke"); },
      huge: async () => "x".repeat(100 << 10) + "THE END",
      surrogate: async () => "a\ud800b",
    });
  });
  after(async () => {
    for (const g of gates.values()) g();
    await ex.stop();
    await s.stop();
  });

  test("a run is accepted, its handler gets the run, and its result is delivered", async () => {
    const body = run({ params: { b: [1, 2], a: "é" }, scheduled_at: 1700000000000 });
    const ticket = JSON.parse(body).ticket;
    const r = await call(ex, "/axe/run", body);
    assert.equal(r.status, 202);
    assert.deepEqual(r.body, { accepted: true });
    const res = await waitFor("the result", () => s.resultOf(ticket));
    assert.equal(res.status, "success");
    assert.equal(res.output, `{"b":[1,2],"a":"é"}`);
    assert.equal(res.error, "");
    assert.equal(res.app, "test");
    assert.equal(res.address, ex.address);
    assert.ok(res.ended_at >= res.started_at);
  });

  test("outputs: JSON of a non-string, the tail of a long one, well-formed text, a throw fails", async () => {
    const cases: Array<[string, object, (r: any) => void]> = [
      ["value", { params: { v: { n: 1 } } }, (r) => assert.equal(r.output, `{"n":1}`)],
      ["value", { params: { v: 7 } }, (r) => assert.equal(r.output, "7")],
      ["value", { params: { v: null } }, (r) => assert.equal(r.output, "null")],
      ["value", { params: {} }, (r) => assert.equal(r.output, "")],
      ["boom", {}, (r) => { assert.equal(r.status, "failed"); assert.equal(r.error, "it broke"); }],
      ["huge", {}, (r) => { assert.equal(Buffer.byteLength(r.output), 64 << 10); assert.ok(r.output.endsWith("THE END")); }],
      ["surrogate", {}, (r) => assert.equal(r.output, "a\ufffdb")],
    ];
    for (const [handler, extra, check] of cases) {
      const body = run({ handler, ...extra });
      assert.equal((await call(ex, "/axe/run", body)).status, 202);
      check(await waitFor(`the result of ${handler}`, () => s.resultOf(JSON.parse(body).ticket)));
    }
  });

  test("signatures: missing, wrong, stale, for another executor or incarnation are 401", async () => {
    const body = run();
    const cases: Array<[string, Parameters<typeof call>[3], RegExp]> = [
      ["unsigned", { sign: false }, /^missing or invalid scheduler signature$/],
      ["another token", { token: "another-token-0123456789" }, /^missing or invalid scheduler signature$/],
      ["ten minutes old", { t: Date.now() - 10 * 60 * 1000 }, /clock/],
      ["no incarnation", { incarnation: null }, /X-Axe-Incarnation/],
      ["another incarnation", { incarnation: "ffffffffffffffffffffffffffffffff" }, /another incarnation/],
      ["the executor's own bearer token", { sign: false, headers: { authorization: `Bearer ${TOKEN}` } }, /signature/],
    ];
    for (const [what, o, want] of cases) {
      const r = await call(ex, "/axe/run", body, o);
      assert.equal(r.status, 401, what);
      assert.match(r.body.error, want, what);
    }
    // The signature covers the epoch header.
    const r = await call(ex, "/axe/run", body, { headers: { "x-axe-epoch": "3" } });
    assert.equal(r.status, 401);
    assert.equal(s.resultOf(JSON.parse(body).ticket), undefined);
  });

  test("an unsigned body over 4 KiB is refused 401 before it is read; a signed one over the limit is 413", async () => {
    const big = run({ params: { pad: "x".repeat(8 << 10) } });
    const r = await call(ex, "/axe/run", big, { sign: false });
    assert.equal(r.status, 401);
    const huge = run({ params: { pad: "x".repeat(1 << 20) } });
    const r2 = await call(ex, "/axe/run", huge);
    assert.equal(r2.status, 413);
    assert.match(r2.body.error, /1048576/);
    const killBig = JSON.stringify({ ticket: "t", pad: "x".repeat(5000) });
    assert.equal((await call(ex, "/axe/kill", killBig)).status, 413);
  });

  test("beat answers a signed call or the executor's own bearer token", async () => {
    const r = await call(ex, "/axe/beat", "", { method: "GET" });
    assert.equal(r.status, 200);
    assert.equal(r.body.app, "test");
    assert.deepEqual(r.body.handlers, ["boom", "echo", "huge", "surrogate", "value", "wait"]);
    const b = await call(ex, "/axe/beat", "", { method: "GET", sign: false, headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(b.status, 200);
    assert.equal((await call(ex, "/axe/beat", "", { method: "GET", sign: false })).status, 401);
    assert.equal((await call(ex, "/axe/beat", "", { method: "POST" })).status, 405);
    assert.equal((await call(ex, "/axe/nothing", "")).status, 404);
  });

  test("malformed runs are 400 naming the field; unknown fields are ignored", async () => {
    const good = JSON.parse(run());
    assert.equal((await call(ex, "/axe/run", JSON.stringify({ ...good, from_the_future: { x: [1] } }))).status, 202);
    const cases: Array<[string | Buffer, RegExp]> = [
      [`{"ticket":"a","task":"b","attempt":1,"deadline":0,"ticket":"c"}`, /^ticket: repeated key/],
      [Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]), /invalid UTF-8/],
      [`{"ticket":"a\\ud800","task":"b","attempt":1,"deadline":0}`, /^ticket: a lone UTF-16 surrogate/],
      [`{"ticket":"a","task":"b","deadline":0}`, /^attempt: required/],
      [`{"ticket":"a","task":"b","attempt":1}`, /^deadline: required/],
      [`{"ticket":"a","task":"b","attempt":"1","deadline":0}`, /^attempt: must be an integer/],
      [`{"ticket":"a","task":"b","attempt":1,"deadline":0} {}`, /trailing data/],
      [`[]`, /must be a JSON object/],
      [``, /empty body/],
    ];
    for (const [body, want] of cases) {
      const r = await call(ex, "/axe/run", body);
      assert.equal(r.status, 400, String(body));
      assert.match(r.body.error, want, String(body));
    }
    const hdr = await call(ex, "/axe/run", run({ ticket: "h1" }), { headers: { "x-axe-ticket": "h2" } });
    assert.equal(hdr.status, 400);
    assert.match(hdr.body.error, /^ticket: header X-Axe-Ticket/);
    const ep = await call(ex, "/axe/run", run({ epoch: 4 }), { epoch: "5" });
    assert.equal(ep.status, 400);
    assert.match(ep.body.error, /^epoch:/);
    const unknown = await call(ex, "/axe/run", run({ handler: "nope" }));
    assert.equal(unknown.status, 404);
    assert.match(unknown.body.error, /unknown handler "nope"/);
  });

  test("a ticket is de-duplicated while it runs and after it finished, and the result is re-sent", async () => {
    const body = run({ handler: "wait" });
    const ticket = JSON.parse(body).ticket;
    assert.deepEqual((await call(ex, "/axe/run", body)).body, { accepted: true });
    await waitFor("the handler to start", () => gates.get(ticket));
    const dup = await call(ex, "/axe/run", body);
    assert.equal(dup.status, 202);
    assert.deepEqual(dup.body, { accepted: true, duplicate: true });
    gates.get(ticket)!();
    await waitFor("the result", () => s.resultOf(ticket));
    const done = await call(ex, "/axe/run", body);
    assert.equal(done.status, 200);
    assert.deepEqual(done.body, { duplicate: true, status: "success", error: "" });
    await waitFor("the result re-sent", () => s.results().filter((r) => r.ticket === ticket).length >= 2);
    const sent = s.results().filter((r) => r.ticket === ticket);
    assert.deepEqual(sent[1], sent[0]);
  });

  test("re-entry: another ticket of a running task is 409 unless parallel", async () => {
    const first = run({ handler: "wait", task: "reentry" });
    const t1 = JSON.parse(first).ticket;
    assert.equal((await call(ex, "/axe/run", first)).status, 202);
    const second = await call(ex, "/axe/run", run({ handler: "wait", task: "reentry" }));
    assert.equal(second.status, 409);
    assert.match(second.body.error, new RegExp(`task "reentry" is already running here with ticket "${t1}"`));
    const par = run({ handler: "wait", task: "reentry", parallel: true });
    const t3 = JSON.parse(par).ticket;
    assert.equal((await call(ex, "/axe/run", par)).status, 202);
    await waitFor("both handlers", () => gates.get(t1) && gates.get(t3));
    gates.get(t1)!();
    gates.get(t3)!();
    await waitFor("both results", () => s.resultOf(t1) && s.resultOf(t3));
    assert.equal((await call(ex, "/axe/run", run({ task: "reentry" }))).status, 202);
  });

  test("epochs: a lower one is 409, per shard apart from the unsharded one; 0 is no HA", async () => {
    assert.equal((await call(ex, "/axe/run", run({ epoch: 5 }))).status, 202);
    const stale = await call(ex, "/axe/run", run({ epoch: 4 }));
    assert.equal(stale.status, 409);
    assert.equal(stale.body.error, "stale epoch 4 < 5");
    assert.equal((await call(ex, "/axe/run", run({ epoch: 0 }))).status, 202);
    assert.equal((await call(ex, "/axe/run", run({ epoch: 2, shard: 7 }))).status, 202);
    assert.equal((await call(ex, "/axe/run", run({ epoch: 3, shard: 40 }))).status, 202);
    const staleShard = await call(ex, "/axe/run", run({ epoch: 1, shard: 7 }));
    assert.equal(staleShard.status, 409);
    assert.equal(staleShard.body.error, "stale epoch 1 < 2 of shard 7");
    assert.equal(ex.epoch, 5);
    assert.equal(ex.shardEpoch(7), 2);
    // The header counts as the epoch of a body without one.
    assert.equal((await call(ex, "/axe/run", run(), { epoch: "3" })).status, 409);
    assert.equal((await call(ex, "/axe/run", run(), { epoch: "6" })).status, 202);
    assert.equal(ex.epoch, 6);
    const kill = await call(ex, "/axe/kill", JSON.stringify({ ticket: "whatever", epoch: 1, shard: 40 }));
    assert.equal(kill.status, 409);
    assert.equal(kill.body.error, "stale epoch 1 < 3 of shard 40");
  });

  test("kill aborts the handler's signal with KilledError; an unknown ticket is 404", async () => {
    const body = run({ handler: "wait" });
    const ticket = JSON.parse(body).ticket;
    assert.equal((await call(ex, "/axe/run", body)).status, 202);
    await waitFor("the handler to start", () => gates.get(ticket));
    const k = await call(ex, "/axe/kill", JSON.stringify({ ticket }));
    assert.equal(k.status, 200);
    assert.deepEqual(k.body, { killed: true });
    const res = await waitFor("the result", () => s.resultOf(ticket));
    assert.equal(res.status, "failed");
    assert.equal(res.error, new KilledError().message);
    assert.equal((await call(ex, "/axe/kill", JSON.stringify({ ticket }))).status, 404);
    assert.equal((await call(ex, "/axe/kill", `{"ticket":`)).status, 400);
  });

  test("the deadline aborts the handler's signal with DeadlineError; a deadline already past never starts the handler", async () => {
    const body = run({ handler: "wait", deadline: Date.now() + 1000 });
    const ticket = JSON.parse(body).ticket;
    assert.equal((await call(ex, "/axe/run", body)).status, 202);
    const res = await waitFor("the result", () => s.resultOf(ticket));
    assert.equal(res.status, "failed");
    // On a machine slow enough to reach the deadline before the handler starts, it is
    // reported not started, for the same reason.
    assert.ok(res.error === new DeadlineError().message || (res.error === `handler not started: ${new DeadlineError().message}` && !gates.has(ticket)), res.error);
    const past = run({ handler: "wait", deadline: Date.now() - 1000 });
    assert.equal((await call(ex, "/axe/run", past)).status, 202);
    const r2 = await waitFor("the result", () => s.resultOf(JSON.parse(past).ticket));
    assert.equal(r2.error, `handler not started: ${new DeadlineError().message}`);
    assert.equal(gates.has(JSON.parse(past).ticket), false);
  });

  test("a batch is admitted run by run, in order", async () => {
    const a = JSON.parse(run());
    const dup = { ...a };
    const batch = { runs: [a, dup, { ticket: "x" }, 7, { ...JSON.parse(run()), handler: "nope" }, { ...JSON.parse(run()), epoch: 1 }] };
    const r = await call(ex, "/axe/runs", JSON.stringify(batch));
    assert.equal(r.status, 200);
    assert.deepEqual(r.body.results.map((x: any) => x.code), [202, 202, 400, 400, 404, 409]);
    assert.deepEqual(r.body.results[1].body, { accepted: true, duplicate: true });
    assert.match(r.body.results[2].body.error, /^task: required/);
    await waitFor("the batch's result", () => s.resultOf(a.ticket));
    assert.equal((await call(ex, "/axe/runs", JSON.stringify({ runs: [] }))).status, 400);
    assert.equal((await call(ex, "/axe/runs", JSON.stringify({ runs: Array(1001).fill(a) }))).status, 400);
    assert.equal((await call(ex, "/axe/runs", `{"runs":[{"ticket":"a","ticket":"b"}]}`)).status, 400);
  });
});

test("the pool and its queue bound the runs; beyond them 429; a killed queued run is reported at once", async () => {
  const s = await FakeScheduler.start();
  const gates = new Map<string, () => void>();
  const ex = await startExecutor(s, { poolSize: 1, queueSize: 1 }, {
    wait: (ctx) => new Promise((resolve) => gates.set(ctx.ticket, () => resolve("ok"))),
  });
  try {
    const [a, b, c] = [run({ handler: "wait" }), run({ handler: "wait" }), run({ handler: "wait" })];
    assert.equal((await call(ex, "/axe/run", a)).status, 202);
    assert.equal((await call(ex, "/axe/run", b)).status, 202);
    const busy = await call(ex, "/axe/run", c);
    assert.equal(busy.status, 429);
    assert.deepEqual(busy.body, { error: "busy" });
    await waitFor("the first handler", () => gates.get(JSON.parse(a).ticket));
    assert.equal(gates.has(JSON.parse(b).ticket), false);
    const k = await call(ex, "/axe/kill", JSON.stringify({ ticket: JSON.parse(b).ticket }));
    assert.equal(k.status, 200);
    const res = await waitFor("the queued run's result", () => s.resultOf(JSON.parse(b).ticket));
    assert.equal(res.error, "handler not started: executor: run killed");
    assert.equal((await call(ex, "/axe/run", c)).status, 202);
    gates.get(JSON.parse(a).ticket)!();
    await waitFor("the third handler", () => gates.get(JSON.parse(c).ticket));
    gates.get(JSON.parse(c).ticket)!();
    await waitFor("all results", () => s.resultOf(JSON.parse(a).ticket) && s.resultOf(JSON.parse(c).ticket));
  } finally {
    for (const g of gates.values()) g();
    await ex.stop();
    await s.stop();
  }
});

test("the finished ticket is forgotten after its dedup_ttl_ms, and then runs again", async () => {
  const s = await FakeScheduler.start();
  let now = 1_800_000_000_000;
  let runs = 0;
  // Signatures are checked against the executor's clock: the test signs with the same one.
  const ex = await startExecutor(s, { now: () => now }, { echo: async () => String(++runs) });
  try {
    const body = run({ dedup_ttl_ms: 60_000 });
    const ticket = JSON.parse(body).ticket;
    assert.equal((await call(ex, "/axe/run", body, { t: now })).status, 202);
    await waitFor("the result", () => s.resultOf(ticket));
    now += 59_000;
    assert.equal((await call(ex, "/axe/run", body, { t: now })).status, 200);
    now += 2_000;
    assert.equal((await call(ex, "/axe/run", body, { t: now })).status, 202);
    await waitFor("the second run's result", () => s.results().some((r) => r.ticket === ticket && r.output === "2"));
    assert.equal(runs, 2);
  } finally {
    await ex.stop();
    await s.stop();
  }
});

test("a persistent dedup store makes a restarted executor answer a ticket it ran before as a duplicate", async () => {
  const s = await FakeScheduler.start();
  // A store outside the process's memory of one executor, answering asynchronously as a
  // database would.
  const kept = new Map<string, string>();
  const store: DedupStore = {
    async get(ticket: string, now: number) {
      await sleep(1);
      const v = kept.get(ticket);
      const r = v === undefined ? undefined : (JSON.parse(v) as FinishedRun);
      return r !== undefined && now < r.expiresAt ? r : undefined;
    },
    async put(ticket: string, r: FinishedRun) {
      await sleep(1);
      kept.set(ticket, JSON.stringify(r));
    },
  };
  let runs = 0;
  const handlers = { echo: async () => `run ${++runs}` };
  const first = await startExecutor(s, { dedupStore: store }, handlers);
  const body = run();
  const ticket = JSON.parse(body).ticket;
  assert.equal((await call(first, "/axe/run", body)).status, 202);
  await waitFor("the result", () => s.resultOf(ticket));
  await first.stop();
  await waitFor("the ticket stored", () => kept.has(ticket));
  const second = await startExecutor(s, { dedupStore: store }, handlers);
  try {
    assert.notEqual(second.incarnation, first.incarnation);
    const r = await call(second, "/axe/run", body);
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { duplicate: true, status: "success", error: "" });
    await waitFor("the result re-sent", () => s.results().filter((x) => x.ticket === ticket).length >= 2);
    assert.equal(runs, 1);
    assert.equal(s.results().filter((x) => x.ticket === ticket)[1].output, "run 1");
  } finally {
    await second.stop();
    await s.stop();
  }
});

test("results are re-sent with backoff until acknowledged, failing over between schedulers", async () => {
  // The first scheduler is a backup (503 naming no primary), the second fails twice with 500
  // and then acknowledges.
  const backup = await FakeScheduler.start((path) => (path.startsWith("/api/v1/callback") ? [503, { error: "this node is a backup", primary: "" }] : undefined));
  const flaky = await FakeScheduler.start((path, n) => (path === "/api/v1/callback" && n < 2 ? [500, { error: "database is down" }] : undefined));
  const ex = await startExecutor([backup.url, flaky.url]);
  try {
    const body = run({ params: { n: 1 } });
    const ticket = JSON.parse(body).ticket;
    assert.equal((await call(ex, "/axe/run", body)).status, 202);
    await waitFor("three tries at the second scheduler", () => flaky.on("/api/v1/callback").length >= 3);
    await sleep(200); // nothing more is sent once acknowledged
    const tries = flaky.on("/api/v1/callback");
    assert.equal(tries.length, 3);
    assert.ok(tries.every((t) => t.ticket === ticket && t.output === `{"n":1}`));
    assert.ok(backup.on("/api/v1/callback").length >= 1);
    assert.equal(ex.inflight, 0);
  } finally {
    await ex.stop();
    await backup.stop();
    await flaky.stop();
  }
});

test("a 503 naming a configured primary is followed; a closed address is skipped", async () => {
  const primary = await FakeScheduler.start();
  const backup = await FakeScheduler.start(() => [503, { error: "this node is a backup", primary: primary.url + "/" }]);
  const dead = await FakeScheduler.start();
  const deadURL = dead.url;
  await dead.stop();
  const ex = await startExecutor([backup.url, deadURL, primary.url]);
  try {
    assert.equal(primary.on("/api/v1/executors/register").length, 1);
    for (const body of [run(), run()]) {
      assert.equal((await call(ex, "/axe/run", body)).status, 202);
      await waitFor("the result at the primary", () => primary.resultOf(JSON.parse(body).ticket));
    }
    // Results go first to the backup, which names the primary; from then on to the primary alone.
    assert.equal(backup.on("/api/v1/callback").length, 1);
  } finally {
    await ex.stop();
    await primary.stop();
    await backup.stop();
  }
});

test("results finished while the sender waits go together in a batch, each settled by its own answer", async () => {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  const s = await FakeScheduler.start();
  s.hold = (path, n) => (path === "/api/v1/callback" && n === 0 ? held : undefined);
  // In the first batch the second result is refused for good (404) and the third fails for now (500).
  s.respond = (path, n, body) => path === "/api/v1/callback/batch"
    ? [200, { results: body.results.map((_: unknown, i: number) => (n === 0 && i === 1 ? { status: 404, error: "unknown ticket" } : n === 0 && i === 2 ? { status: 500, error: "later" } : { status: 200, ok: true })) }]
    : undefined;
  const ex = await startExecutor(s, { resultSenders: 1 });
  try {
    const lone = run();
    assert.equal((await call(ex, "/axe/run", lone)).status, 202);
    await waitFor("the lone result's call", () => s.on("/api/v1/callback").length === 1);
    const bodies = Array.from({ length: 4 }, () => JSON.parse(run()));
    const r = await call(ex, "/axe/runs", JSON.stringify({ runs: bodies }));
    assert.deepEqual(r.body.results.map((x: any) => x.code), [202, 202, 202, 202]);
    await waitFor("the four runs to finish", () => ex.inflight === 0);
    release();
    const [batch] = await waitFor("a batch", () => s.on("/api/v1/callback/batch").length > 0 && s.on("/api/v1/callback/batch"));
    assert.deepEqual(batch.results.map((x: any) => x.ticket), bodies.map((b) => b.ticket));
    await waitFor("the re-send of the third", () => s.results().filter((x) => x.ticket === bodies[2].ticket).length === 2);
    await sleep(200); // and nothing more: the refused one is final, the others acknowledged
    for (const [i, want] of [[0, 1], [1, 1], [2, 2], [3, 1]]) {
      assert.equal(s.results().filter((x) => x.ticket === bodies[i!].ticket).length, want, `result ${i}`);
    }
  } finally {
    await ex.stop();
    await s.stop();
  }
});

test("options are checked, naming the field", () => {
  const base = { app: "a", schedulers: ["http://127.0.0.1:7070"], logger: silentLogger };
  const cases: Array<[object, RegExp]> = [
    [{ app: "" }, /^app: required/],
    [{ app: "a b" }, /^app:/],
    [{ schedulers: [] }, /^schedulers:/],
    [{ schedulers: ["ftp://x"] }, /^schedulers\[0\]: .*scheme/],
    [{ schedulers: ["http://x:1/path"] }, /^schedulers\[0\]: .*scheme:\/\/host/],
    [{ listen: "0.0.0.0:9100" }, /^listen: .*without a token/],
    [{ listen: "nonsense" }, /^listen:/],
    [{ outputLimit: (1 << 20) + 1 }, /^outputLimit:/],
    [{ poolSize: 0 }, /^poolSize:/],
    [{ resendMinMs: 100, resendMaxMs: 50 }, /^resendMaxMs:/],
    [{ tlsClientCA: "x" }, /^tlsClientCA:/],
    [{ advertise: "0.0.0.0:9100" }, /^advertise:/],
  ];
  for (const [o, want] of cases) assert.throws(() => new Executor({ ...base, ...o } as any), (e: Error) => e.name === "ConfigError" && want.test(e.message), JSON.stringify(o));
  assert.doesNotThrow(() => new Executor({ ...base, listen: "0.0.0.0:9100", token: TOKEN }));
  const ex = new Executor(base);
  assert.throws(() => ex.handle("", async () => 1), /handler name/);
  ex.handle("x", async () => 1);
  assert.throws(() => ex.handle("x", async () => 1), /twice/);
});
