// End to end against the real axe: `axe serve` on the embedded SQLite store with a token file,
// the echo example started as its own process, a task whose callback is the executor, and the
// runs axe recorded. AXE_BIN names the axe binary (test.sh builds it); without it this test
// is skipped.

import * as assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const AXE = process.env.AXE_BIN ?? "";
const here = fileURLToPath(new URL(".", import.meta.url)); // dist/test/
const echo = resolve(here, "..", "..", "examples", "echo");

const OPS = "e2e-ops-token-0123456789abcdef";
const EXEC = "e2e-executor-token-0123456789abcdef";

async function freePort(): Promise<number> {
  const s = createServer();
  s.listen(0, "127.0.0.1");
  await once(s, "listening");
  const port = (s.address() as { port: number }).port;
  s.close();
  await once(s, "close");
  return port;
}

function start(cmd: string, args: string[], env: Record<string, string>, log: string[]): ChildProcess {
  const p = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  p.stdout!.on("data", (c: Buffer) => log.push(c.toString()));
  p.stderr!.on("data", (c: Buffer) => log.push(c.toString()));
  return p;
}

test("the echo example runs tasks of a real axe, and deregisters on SIGTERM", { skip: AXE === "" ? "AXE_BIN is not set" : false, timeout: 180_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "axe-ts-e2e-"));
  const axeLog: string[] = [];
  const echoLog: string[] = [];
  let axe: ChildProcess | undefined;
  let ex: ChildProcess | undefined;
  try {
    writeFileSync(join(dir, "tokens.json"), JSON.stringify([
      { name: "ops", scope: "write", token: OPS },
      { name: "echo", scope: "executor", token: EXEC, apps: ["echo"] },
    ]));
    const [apiPort, exPort] = [await freePort(), await freePort()];
    const base = `http://127.0.0.1:${apiPort}`;
    axe = start(AXE, ["serve", "--addr", `127.0.0.1:${apiPort}`, "--db", `sqlite:${join(dir, "axe.db")}`, "--token-file", join(dir, "tokens.json")], {}, axeLog);
    const api = async (method: string, path: string, body?: unknown) => {
      const r = await fetch(base + path, {
        method, headers: { authorization: `Bearer ${OPS}`, "content-type": "application/json" },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      return { status: r.status, body: (await r.json().catch(() => undefined)) as any };
    };
    await pollAsync("axe to be ready", async () => (await fetch(`${base}/readyz`).catch(() => undefined))?.status === 200, 60_000);

    ex = start(echo, [], { AXE_SCHEDULERS: base, AXE_LISTEN: `127.0.0.1:${exPort}`, AXE_TOKEN: EXEC, AXE_APP: "echo" }, echoLog);
    await pollAsync("the echo executor to register", async () => {
      const r = await api("GET", "/api/v1/executors");
      return r.body?.executors?.some((e: any) => e.app === "echo" && e.address === `127.0.0.1:${exPort}` && e.status === "alive");
    }, 120_000);

    const created = await api("POST", "/api/v1/tasks", {
      name: "ts-echo", trigger: "manual", timeout_sec: 30, callback: { type: "executor", app: "echo", handler: "echo" },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));

    const cases: Array<[unknown, string, string, string]> = [
      [{ hello: "wörld", n: [1, 2.5] }, "success", `{"hello":"wörld","n":[1,2.5]}`, ""],
      [{ fail: "the e2e failure" }, "failed", "", "the e2e failure"],
    ];
    for (const [params, result, output, error] of cases) {
      const now = await api("POST", "/api/v1/tasks/ts-echo/run", { params });
      assert.equal(now.status, 202, JSON.stringify(now.body));
      const ticket = now.body.ticket as string;
      const r = await pollAsync(`run ${ticket} to end`, async () => {
        const got = await api("GET", `/api/v1/runs/${ticket}`);
        return got.status === 200 && got.body.result !== "running" && got.body.result !== "" ? got.body : undefined;
      }, 60_000);
      assert.equal(r.result, result, JSON.stringify(r));
      assert.equal(r.output ?? "", output);
      assert.equal(r.error ?? "", error);
    }

    ex.kill("SIGTERM");
    const [code] = await once(ex, "exit");
    assert.equal(code, 0, echoLog.join(""));
    await pollAsync("the executor deregistered", async () => {
      const r = await api("GET", "/api/v1/executors");
      return !r.body?.executors?.some((e: any) => e.app === "echo" && e.status === "alive");
    }, 30_000);
  } catch (err) {
    process.stderr.write(`--- axe log ---\n${axeLog.join("")}\n--- echo log ---\n${echoLog.join("")}\n`);
    throw err;
  } finally {
    if (ex !== undefined && ex.exitCode === null) {
      ex.kill("SIGKILL");
      await once(ex, "exit");
    }
    if (axe !== undefined && axe.exitCode === null) {
      axe.kill("SIGTERM");
      await once(axe, "exit");
    }
    rmSync(dir, { recursive: true, force: true });
  }
});

/** waitFor for an asynchronous condition. */
async function pollAsync<T>(what: string, cond: () => Promise<T | undefined | false>, timeoutMs: number): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
