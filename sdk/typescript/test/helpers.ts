// Test helpers: a scheduler that speaks the scheduler's side of the protocol over real HTTP on
// loopback, records what executors send it and answers as a test tells it to; and a signed
// caller of an executor's endpoints.

import * as http from "node:http";
import * as https from "node:https";
import { setTimeout as sleep } from "node:timers/promises";
import { Executor, type ExecutorOptions, silentLogger } from "../src/index.js";
import { dispatchKey, signCall } from "../src/sign.js";

export const TOKEN = "test-executor-token-0123456789";

export interface Received {
  path: string;
  auth: string | undefined;
  body: any;
}

/** Answers: a function of the path and how many calls of that path came before. */
export type Responder = (path: string, n: number, body: any) => [number, object] | undefined;

export class FakeScheduler {
  readonly calls: Received[] = [];
  private readonly counts = new Map<string, number>();
  respond: Responder = () => undefined;
  /** Holds the answer to a call until the promise it returns settles. */
  hold: (path: string, n: number) => Promise<void> | undefined = () => undefined;
  private server!: http.Server;
  url = "";

  static async start(respond?: Responder, tls?: https.ServerOptions): Promise<FakeScheduler> {
    const s = new FakeScheduler();
    if (respond !== undefined) s.respond = respond;
    const handler = (req: http.IncomingMessage, res: http.ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const path = req.url ?? "";
        const text = Buffer.concat(chunks).toString("utf8");
        const body = text === "" ? undefined : JSON.parse(text);
        const n = s.counts.get(path) ?? 0;
        s.counts.set(path, n + 1);
        s.calls.push({ path, auth: req.headers.authorization, body });
        const answer = () => {
          const [status, answer] = s.respond(path, n, body) ?? s.defaultAnswer(path, body);
          const out = JSON.stringify(answer);
          res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(out) });
          res.end(out);
        };
        const held = s.hold(path, n);
        if (held === undefined) answer();
        else void held.then(answer);
      });
    };
    s.server = tls !== undefined ? https.createServer(tls, handler) : http.createServer(handler);
    await new Promise<void>((r) => s.server.listen(0, "127.0.0.1", r));
    const a = s.server.address() as { port: number };
    s.url = `${tls !== undefined ? "https" : "http"}://127.0.0.1:${a.port}`;
    return s;
  }

  defaultAnswer(path: string, body: any): [number, object] {
    switch (path) {
      case "/api/v1/executors/register":
        return [200, { heartbeat_interval_ms: 10000, lost_after_ms: 30000, version: 2, some_new_field: true }];
      case "/api/v1/callback/batch":
        return [200, { results: body.results.map(() => ({ status: 200, ok: true })) }];
      default:
        return [200, { ok: true }];
    }
  }

  /** The bodies received on path. */
  on(path: string): any[] {
    return this.calls.filter((c) => c.path === path).map((c) => c.body);
  }

  /** Every result received, from single and batch callbacks. */
  results(): any[] {
    const out: any[] = [];
    for (const c of this.calls) {
      if (c.path === "/api/v1/callback") out.push(c.body);
      if (c.path === "/api/v1/callback/batch") out.push(...c.body.results);
    }
    return out;
  }

  resultOf(ticket: string): any | undefined {
    return this.results().find((r) => r.ticket === ticket);
  }

  async stop(): Promise<void> {
    await new Promise<void>((r) => {
      this.server.close(() => r());
      this.server.closeAllConnections();
    });
  }
}

/** Waits until cond() is truthy, checking every 10 ms, for at most timeoutMs (generous: a busy machine). */
export async function waitFor<T>(what: string, cond: () => T | undefined | false, timeoutMs = 20_000): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = cond();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

export async function startExecutor(sched: FakeScheduler | string[], opts: Partial<ExecutorOptions> = {}, handlers?: Record<string, (ctx: any) => unknown>): Promise<Executor> {
  const ex = new Executor({
    app: "test",
    schedulers: Array.isArray(sched) ? sched : [sched.url],
    token: TOKEN,
    logger: silentLogger,
    resendMinMs: 10,
    resendMaxMs: 100,
    ...opts,
  });
  for (const [name, h] of Object.entries(handlers ?? { echo: async (ctx: any) => ctx.paramsJSON ?? "{}" })) ex.handle(name, h);
  await ex.start();
  return ex;
}

export interface CallOptions {
  method?: string;
  sign?: boolean;
  token?: string;
  epoch?: string;
  incarnation?: string | null;
  t?: number;
  headers?: Record<string, string>;
  tls?: https.RequestOptions;
}

/** Calls an executor endpoint, signed as the scheduler signs it unless sign is false. */
export function call(ex: Executor, path: string, body: string | Buffer, o: CallOptions = {}): Promise<{ status: number; body: any; text: string }> {
  const payload = typeof body === "string" ? Buffer.from(body, "utf8") : body;
  const headers: Record<string, string | number> = { "content-type": "application/json", "content-length": payload.length, ...(o.headers ?? {}) };
  const incarnation = o.incarnation === undefined ? ex.incarnation : o.incarnation;
  if (incarnation !== null) headers["x-axe-incarnation"] = incarnation;
  if (o.epoch !== undefined) headers["x-axe-epoch"] = o.epoch;
  if (o.sign !== false) {
    headers.authorization = signCall(dispatchKey(o.token ?? TOKEN), o.t ?? Date.now(), {
      address: ex.address, path: path.split("?")[0]!, epoch: o.epoch ?? "", incarnation: incarnation ?? "", body: payload,
    });
  }
  const mod = o.tls !== undefined ? https : http;
  const scheme = o.tls !== undefined ? "https" : "http";
  return new Promise((resolve, reject) => {
    const req = mod.request(`${scheme}://${ex.address}${path}`, { method: o.method ?? "POST", headers, agent: false, ...(o.tls ?? {}) }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        let parsed: any;
        try {
          parsed = JSON.parse(text);
        } catch {
          parsed = undefined;
        }
        resolve({ status: res.statusCode ?? 0, body: parsed, text });
      });
    });
    req.on("error", reject);
    req.end(payload);
  });
}

let seq = 0;
/** A run body: ticket and task unique unless given. */
export function run(fields: Record<string, unknown> = {}): string {
  seq++;
  return JSON.stringify({ ticket: `tk-${process.pid}-${seq}`, task: `task-${seq}`, handler: "echo", attempt: 1, deadline: 0, ...fields });
}
