// Runs per second of the no-op echo handler through one executor process, and the executor's
// CPU per run. This process plays the scheduler: it starts each executor command given (with
// the conformance suite's environment), takes its registration, sends it signed runs with a
// fixed number in flight, and counts the results it reports. Commands are measured one after
// another in the same run, so an SDK can be set against another (the Go SDK's echo) on the
// same machine under the same load.
//
//   node dist/bench/noop.js [--runs 20000] [--inflight 64] CMD...

import { type ChildProcess, spawn } from "node:child_process";
import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";
import * as http from "node:http";
import { createServer } from "node:net";
import { dispatchKey, signCall } from "../src/sign.js";

const TOKEN = "bench-token-0123456789abcdef";
const key = dispatchKey(TOKEN);

interface Registration {
  address: string;
  incarnation: string;
}

let registration: Registration | undefined;
let results = 0;
let onResult: (() => void) | undefined;

function answer(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

const scheduler = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    const body = chunks.length > 0 ? JSON.parse(Buffer.concat(chunks).toString("utf8")) : {};
    switch (req.url) {
      case "/api/v1/executors/register":
        registration = { address: body.address, incarnation: body.incarnation ?? "" };
        return answer(res, 200, { heartbeat_interval_ms: 10000, lost_after_ms: 30000, version: 2 });
      case "/api/v1/callback":
        results++;
        onResult?.();
        return answer(res, 200, { ok: true });
      case "/api/v1/callback/batch":
        results += body.results.length;
        onResult?.();
        return answer(res, 200, { results: body.results.map(() => ({ status: 200, ok: true })) });
      default:
        return answer(res, 200, { ok: true });
    }
  });
});

/** The Authorization header of a call: version 2 for an executor that registered an incarnation, else version 1. */
function sign(path: string, body: Buffer): string {
  const r = registration!;
  const t = Date.now();
  if (r.incarnation !== "") return signCall(key, t, { address: r.address, path, epoch: "", incarnation: r.incarnation, body });
  const sig = createHmac("sha256", key).update(`axe-dispatch-v1\n${t}\n${r.address}\n${path}\n\n`).update(body).digest("hex");
  return `AXE-HMAC-SHA256 t=${t},sig=${sig}`;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 1024 });

function post(path: string, body: Buffer): Promise<number> {
  const r = registration!;
  return new Promise((resolve, reject) => {
    const req = http.request(`http://${r.address}${path}`, {
      method: "POST", agent,
      headers: {
        "content-type": "application/json", "content-length": body.length, authorization: sign(path, body),
        ...(r.incarnation !== "" ? { "x-axe-incarnation": r.incarnation } : {}),
      },
    }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode ?? 0));
    });
    req.on("error", reject);
    req.end(body);
  });
}

let seq = 0;
/** Sends n runs, at most inflight at once, and waits for all their results. */
async function drive(n: number, inflight: number): Promise<number> {
  const base = results;
  const done = new Promise<void>((resolve) => {
    onResult = () => {
      if (results - base >= n) resolve();
    };
  });
  const began = process.hrtime.bigint();
  let next = 0;
  const progress = process.env.BENCH_PROGRESS !== undefined
    ? setInterval(() => console.error(`progress: ${next} sent, ${results - base} results`), 1000)
    : undefined;
  const worker = async () => {
    while (next < n) {
      next++;
      seq++;
      const body = Buffer.from(JSON.stringify({ ticket: `b-${seq}`, task: `b-${seq}`, handler: "echo", attempt: 1, deadline: 0 }));
      for (;;) {
        const status = await post("/axe/run", body);
        if (status === 202) break;
        if (status !== 429) throw new Error(`run answered ${status}`);
        await new Promise((r) => setTimeout(r, 1));
      }
    }
  };
  await Promise.all(Array.from({ length: inflight }, worker));
  await done;
  clearInterval(progress);
  return Number(process.hrtime.bigint() - began) / 1e9;
}

/** CPU seconds (user + system) of a process so far, from /proc. */
function cpuSeconds(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = f.slice(f.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
}

async function freePort(): Promise<number> {
  const s = createServer().listen(0, "127.0.0.1");
  await new Promise((r) => s.once("listening", r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

async function measure(cmd: string, runs: number, inflight: number): Promise<void> {
  registration = undefined;
  const port = await freePort();
  const schedURL = `http://127.0.0.1:${(scheduler.address() as { port: number }).port}`;
  const child: ChildProcess = spawn("/bin/sh", ["-c", `exec ${cmd}`], {
    env: { ...process.env, AXE_SCHEDULERS: schedURL, AXE_LISTEN: `127.0.0.1:${port}`, AXE_TOKEN: TOKEN, AXE_APP: "echo" },
    stdio: ["ignore", "ignore", "inherit"],
  });
  const until = Date.now() + 120_000;
  while (registration === undefined) {
    if (Date.now() > until || child.exitCode !== null) throw new Error(`${cmd} did not register`);
    await new Promise((r) => setTimeout(r, 20));
  }
  await drive(Math.min(2000, runs), inflight); // warm up (JIT, connections)
  const cpu0 = cpuSeconds(child.pid!);
  const secs = await drive(runs, inflight);
  const cpu = cpuSeconds(child.pid!) - cpu0;
  console.log(`${cmd}: ${runs} runs in ${secs.toFixed(2)} s = ${Math.round(runs / secs)} runs/s at ${inflight} in flight; executor CPU ${((cpu / runs) * 1e6).toFixed(0)} µs/run (${cpu.toFixed(2)} s)`);
  child.kill("SIGTERM");
  await new Promise((r) => child.once("exit", r));
}

const args = process.argv.slice(2);
let runs = 20000;
let inflight = 64;
const cmds: string[] = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--runs") runs = Number(args[++i]);
  else if (args[i] === "--inflight") inflight = Number(args[++i]);
  else cmds.push(args[i]!);
}
if (cmds.length === 0) {
  console.error("usage: node dist/bench/noop.js [--runs N] [--inflight N] CMD...");
  process.exit(2);
}
scheduler.listen(0, "127.0.0.1", async () => {
  try {
    for (const cmd of cmds) await measure(cmd, runs, inflight);
  } catch (err) {
    console.error((err as Error).message);
    process.exitCode = 1;
  }
  agent.destroy();
  scheduler.close();
});
