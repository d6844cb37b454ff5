// The executor: an HTTP(S) server of /axe/run, /axe/runs, /axe/kill and /axe/beat that runs
// async handlers, and a client of the scheduler that registers, heartbeats, reports results
// and deregisters (docs/protocol.md, version 2).

import { randomBytes, timingSafeEqual } from "node:crypto";
import * as http from "node:http";
import * as https from "node:https";
import { isIP } from "node:net";
import { availableParallelism } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import { type Answer, SchedulerClient, errorText, parseSchedulerURL } from "./client.js";
import { type DedupStore, type FinishedRun, MemoryDedupStore } from "./dedup.js";
import {
  ConfigError,
  DeadlineError,
  KilledError,
  RegistrationRejectedError,
  ShutdownError,
  UnauthorizedError,
} from "./errors.js";
import { FieldError } from "./json.js";
import { type Logger, consoleLogger } from "./log.js";
import {
  HEADER_ATTEMPT,
  HEADER_EPOCH,
  HEADER_INCARNATION,
  HEADER_TASK,
  HEADER_TICKET,
  MAX_ERROR_BYTES,
  MAX_NAME_BYTES,
  MAX_OUTPUT_BYTES,
  MAX_RUNS_BODY,
  MAX_RUN_BODY,
  MAX_SMALL_BODY,
  PATH_BEAT,
  PATH_CALLBACK,
  PATH_CALLBACK_BATCH,
  PATH_DEREGISTER,
  PATH_HEARTBEAT,
  PATH_KILL,
  PATH_REGISTER,
  PATH_RUN,
  PATH_RUNS,
  PROTOCOL_VERSION,
  type ResultBody,
  type RunRequest,
  clipStart,
  clipTail,
  decodeKill,
  decodeRun,
  decodeRuns,
} from "./protocol.js";
import { BAD_SIGNATURE, dispatchKey, plausibleCall, verifyCall } from "./sign.js";

/** Defaults of ExecutorOptions. */
export const LISTEN_DEFAULT = "127.0.0.1:0";
export const HEARTBEAT_INTERVAL_MS_DEFAULT = 10_000;
export const QUEUE_SIZE_DEFAULT = 256;
export const DEDUP_TTL_MS_DEFAULT = 10 * 60 * 1000;
export const RESEND_MIN_MS_DEFAULT = 500;
export const RESEND_MAX_MS_DEFAULT = 30_000;
export const REQUEST_TIMEOUT_MS_DEFAULT = 5_000;
export const RESULT_SENDERS_DEFAULT = 8;
export const OUTPUT_LIMIT_DEFAULT = 64 << 10;
export const STOP_TIMEOUT_MS_DEFAULT = 60_000;
/** Handlers running at once per CPU, by default (R5.4: 2×CPU×2). */
export const POOL_SIZE_PER_CPU_DEFAULT = 4;

/** The most results one batch callback carries, and the most bytes it should reach. */
const RESULT_BATCH_MAX = 256;
const RESULT_BATCH_BYTES = 512 << 10;
/** setTimeout's longest delay; a later deadline is reached in steps. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** What a handler gets for one run. */
export interface RunContext {
  /** The run's globally unique ticket: the idempotency key of side effects. */
  readonly ticket: string;
  /** The task this run belongs to. */
  readonly task: string;
  /** The name this handler was registered under. */
  readonly handler: string;
  /** The task's group and kind ("" when none). */
  readonly group: string;
  readonly kind: string;
  /** The attempt number (1 for the first, retries count up). */
  readonly attempt: number;
  /** The task's params as a JavaScript value; undefined when it has none. */
  readonly params: unknown;
  /** The params as compact JSON text (numbers spelled as sent); undefined when none. */
  readonly paramsJSON: string | undefined;
  /** When the run was due; undefined when the scheduler did not say. */
  readonly scheduledAt: Date | undefined;
  /** When the scheduler stops waiting for the result; undefined when none. */
  readonly deadline: Date | undefined;
  /** The lease epoch of the scheduler that sent the run (0 without HA). */
  readonly epoch: number;
  /**
   * Aborted at the deadline (reason DeadlineError), by /axe/kill (KilledError), or when
   * stop() gives up waiting (ShutdownError). Pass it on to fetch, child processes, timers.
   */
  readonly signal: AbortSignal;
}

/**
 * A handler: its resolved value is the run's output (a string as is, anything else as JSON;
 * undefined is no output), a throw or a rejection fails the run with the error's message.
 */
export type Handler = (ctx: RunContext) => unknown;

/** How an Executor is configured; only app and schedulers are required. */
export interface ExecutorOptions {
  /** The executor application name tasks reference in callback.app. Required. */
  app: string;
  /** Base URLs of the schedulers, e.g. "http://axe-a:7070"; failed over in order. Required. */
  schedulers: string[];
  /** host:port to listen on. Defaults to LISTEN_DEFAULT (loopback, any free port). */
  listen?: string;
  /** host:port the scheduler dials. Defaults to the listener's address; required when listening on a wildcard host. */
  advertise?: string;
  /**
   * The executor token: sent as "Authorization: Bearer <token>" to the scheduler, and the key
   * every call of the scheduler must be signed with. Defaults to "": nothing is checked, and
   * then only a loopback listener is allowed (or insecureNoAuth).
   */
  token?: string;
  /** Lets a listener beyond loopback run without a token. Defaults to false. */
  insecureNoAuth?: boolean;
  /** PEM certificate chain and key to serve HTTPS with (registers protocol "https"). Defaults to plain HTTP. */
  tlsCert?: string | Buffer;
  tlsKey?: string | Buffer;
  /** PEM CAs whose client certificates are required on every connection (mTLS). Defaults to none asked for. */
  tlsClientCA?: string | Buffer;
  /** PEM CAs trusted for https:// schedulers. Defaults to Node's trust store. */
  schedulerCA?: string | Buffer;
  /** Heartbeat period; a shorter heartbeat_interval_ms from the scheduler wins. Defaults to HEARTBEAT_INTERVAL_MS_DEFAULT. */
  heartbeatIntervalMs?: number;
  /** Handlers that run at once. Defaults to POOL_SIZE_PER_CPU_DEFAULT × CPUs. */
  poolSize?: number;
  /** Accepted runs that may wait for a free slot; beyond it /axe/run answers 429. Defaults to QUEUE_SIZE_DEFAULT. */
  queueSize?: number;
  /** How long a finished ticket is remembered when the run has no dedup_ttl_ms. Defaults to DEDUP_TTL_MS_DEFAULT. */
  dedupTtlMs?: number;
  /** Where finished tickets are remembered. Defaults to a MemoryDedupStore. */
  dedupStore?: DedupStore;
  /** First and largest delay between re-sends of a result. Default RESEND_MIN_MS_DEFAULT, RESEND_MAX_MS_DEFAULT. */
  resendMinMs?: number;
  resendMaxMs?: number;
  /** Bounds one call to one scheduler address. Defaults to REQUEST_TIMEOUT_MS_DEFAULT. */
  requestTimeoutMs?: number;
  /** Result calls in flight at once. Defaults to RESULT_SENDERS_DEFAULT. */
  resultSenders?: number;
  /** The largest output reported, in bytes (the tail is kept); at most 1 MiB. Defaults to OUTPUT_LIMIT_DEFAULT. */
  outputLimit?: number;
  /** Where to log. Defaults to consoleLogger("info"). */
  logger?: Logger;
  /** The clock of results, signatures and de-duplication (Unix ms). Defaults to Date.now. */
  now?: () => number;
}

type Config = Required<Omit<ExecutorOptions, "advertise" | "tlsCert" | "tlsKey" | "tlsClientCA" | "schedulerCA">> &
  Pick<ExecutorOptions, "advertise" | "tlsCert" | "tlsKey" | "tlsClientCA" | "schedulerCA">;

/** An accepted run, queued or running. */
interface ActiveRun {
  run: RunRequest;
  handler: Handler;
  controller: AbortController;
  timer: NodeJS.Timeout | undefined;
  started: boolean;
  done: boolean;
}

/** A finished run whose result is being delivered. */
interface Outcome {
  ticket: string;
  status: "success" | "failed";
  error: string;
  body: string;
  /** A repeated dispatch asked for one more delivery after the current one. */
  again: boolean;
}

type Reply = [number, object];

/**
 * An executor for one app. Register handlers with handle(), then start(); stop() once.
 *
 * ```ts
 * const ex = new Executor({ app: "billing", schedulers: ["http://127.0.0.1:7070"], token });
 * ex.handle("invoice", async (ctx) => `invoiced ${ctx.ticket}`);
 * await ex.start();
 * ```
 */
export class Executor {
  /** This process's incarnation: a random id sent at registration, which every signed call must name. */
  readonly incarnation: string = randomBytes(16).toString("hex");

  private readonly cfg: Config;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly key: Buffer | undefined;
  private readonly ownAuth: Buffer | undefined;
  private readonly store: DedupStore;
  /** results: result calls; ctl: register, heartbeat, deregister, on connections of their own. */
  private readonly results: SchedulerClient;
  private readonly ctl: SchedulerClient;

  private readonly handlers = new Map<string, Handler>();
  private handlerNames: string[] = [];
  private state: "new" | "starting" | "started" | "stopped" = "new";
  private server: http.Server | undefined;
  private advertised = "";
  private accepting = false;
  private stopping = false;
  private stopped: Promise<void> | undefined;

  private readonly running = new Map<string, ActiveRun>();
  private readonly tasks = new Map<string, string>();
  private readonly waiting: ActiveRun[] = [];
  private active = 0;

  private highestEpoch = 0;
  private readonly shardEpochs = new Map<number, number>();

  private readonly delivering = new Map<string, Outcome>();
  private outbox: Outcome[] = [];
  private pendingResults = 0;
  private senderWake: Array<() => void> = [];
  private senders: Promise<void>[] = [];
  private sendersClosed = false;
  private readonly abandon = new AbortController();

  private hbInterval: number;
  private readonly hbStop = new AbortController();
  private hbDone: Promise<void> = Promise.resolve();

  private readonly watchers = new Set<() => void>();

  constructor(options: ExecutorOptions) {
    this.cfg = withDefaults(options);
    validate(this.cfg);
    this.log = this.cfg.logger;
    this.now = this.cfg.now;
    if (this.cfg.token !== "") {
      this.key = dispatchKey(this.cfg.token);
      this.ownAuth = Buffer.from(`Bearer ${this.cfg.token}`, "utf8");
    }
    this.store = this.cfg.dedupStore;
    this.results = new SchedulerClient(this.cfg.schedulers, this.cfg.token, this.cfg.requestTimeoutMs, this.cfg.schedulerCA, this.log);
    this.ctl = new SchedulerClient(this.cfg.schedulers, this.cfg.token, this.cfg.requestTimeoutMs, this.cfg.schedulerCA, this.log);
    this.hbInterval = this.cfg.heartbeatIntervalMs;
  }

  /**
   * Registers handler under name, which tasks reach through callback {"type": "executor",
   * "app": app, "handler": name}. Only before start(); a name is taken once.
   */
  handle(name: string, handler: Handler): this {
    if (this.state !== "new") throw new ConfigError(`handle(${JSON.stringify(name)}) after start()`);
    if (name === "" || Buffer.byteLength(name) > MAX_NAME_BYTES) {
      throw new ConfigError(`handler name must be 1 to ${MAX_NAME_BYTES} bytes, got ${JSON.stringify(name)}`);
    }
    if (typeof handler !== "function") throw new ConfigError(`handler ${JSON.stringify(name)} is not a function`);
    if (this.handlers.has(name)) throw new ConfigError(`handler ${JSON.stringify(name)} registered twice`);
    this.handlers.set(name, handler);
    return this;
  }

  /** The host:port registered with the scheduler ("" before start()). */
  get address(): string {
    return this.advertised;
  }

  /** The highest epoch seen on a run or kill that names no shard. */
  get epoch(): number {
    return this.highestEpoch;
  }

  /** The highest epoch seen on a run or kill of shard. */
  shardEpoch(shard: number): number {
    return this.shardEpochs.get(shard) ?? 0;
  }

  /** Runs accepted and not finished (running and queued). */
  get inflight(): number {
    return this.running.size;
  }

  /**
   * Listens, registers and starts heartbeats; resolves once all of them run. An unreachable
   * scheduler is no failure (registration is retried every heartbeat); a scheduler refusing
   * the token (UnauthorizedError) or the registration (RegistrationRejectedError) is: start()
   * undoes what it started and rejects.
   */
  async start(): Promise<void> {
    if (this.state !== "new") throw new ConfigError("start() called twice, or after stop()");
    if (this.handlers.size === 0) throw new ConfigError("no handlers: call handle() before start()");
    this.state = "starting";
    this.handlerNames = [...this.handlers.keys()].sort();
    const { host, port } = splitHostPort(this.cfg.listen);
    const server = this.cfg.tlsCert !== undefined
      ? https.createServer({
          cert: this.cfg.tlsCert,
          key: this.cfg.tlsKey,
          minVersion: "TLSv1.2",
          ...(this.cfg.tlsClientCA !== undefined ? { ca: this.cfg.tlsClientCA, requestCert: true, rejectUnauthorized: true } : {}),
        })
      : http.createServer();
    server.keepAliveTimeout = 120_000;
    server.headersTimeout = 30_000;
    server.requestTimeout = 30_000;
    server.on("request", (req: http.IncomingMessage, res: http.ServerResponse) => this.serve(req, res));
    server.on("clientError", (err: NodeJS.ErrnoException, socket) => {
      // A request HTTP cannot parse gets the protocol's error shape, as any other refusal.
      if (socket.writable && !(err.code === "ECONNRESET")) {
        const tooLarge = err.code === "HPE_HEADER_OVERFLOW";
        const body = JSON.stringify({ error: tooLarge ? "request headers too large" : "malformed HTTP request" });
        socket.end(`HTTP/1.1 ${tooLarge ? "431 Request Header Fields Too Large" : "400 Bad Request"}\r\ncontent-type: application/json\r\n` +
          `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
        return;
      }
      socket.destroy();
    });
    try {
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(port, host, () => {
          server.off("error", reject);
          resolve();
        });
      });
    } catch (err) {
      this.state = "new";
      throw new ConfigError(`cannot listen on ${this.cfg.listen}: ${(err as Error).message}`);
    }
    this.server = server;
    const bound = server.address();
    let advertise = this.cfg.advertise;
    if (advertise === undefined) {
      if (bound === null || typeof bound === "string" || isWildcard(bound.address)) {
        server.close();
        this.state = "new";
        throw new ConfigError(`advertise: ${this.cfg.listen} listens on every interface; set advertise to the host:port the scheduler dials`);
      }
      advertise = joinHostPort(bound.address, bound.port);
    }
    this.advertised = advertise;
    for (let i = 0; i < this.cfg.resultSenders; i++) this.senders.push(this.sender());
    this.accepting = true;
    this.state = "started";
    let registered = true;
    try {
      await this.register();
    } catch (err) {
      if (err instanceof UnauthorizedError || err instanceof RegistrationRejectedError) {
        await this.stop(1_000).catch(() => {});
        throw err;
      }
      registered = false;
      this.log.warn("cannot register yet; retrying every heartbeat", { err: (err as Error).message });
    }
    this.hbDone = this.heartbeatLoop(registered);
    this.log.info("executor started", {
      app: this.cfg.app, address: advertise, protocol: this.scheme(), handlers: this.handlerNames.join(","),
      pool: this.cfg.poolSize, queue: this.cfg.queueSize, incarnation: this.incarnation,
    });
  }

  /**
   * Stops the executor, in this order:
   *
   *  1. /axe/run answers 503 to new runs (kill and beat keep working).
   *  2. It deregisters, so the scheduler sends it no new run. Heartbeats go on (without
   *     registering again, which would end the deregistration) until the drain is done, so
   *     the scheduler does not declare the runs in flight lost.
   *  3. Runs already accepted, running or queued, finish; their signals are not aborted.
   *  4. Their results are delivered (acknowledged or finally refused).
   *  5. Heartbeats stop; the server closes.
   *
   * If timeoutMs passes during 3 or 4, every run's signal is aborted (ShutdownError), unsent
   * results are abandoned (the scheduler times those runs out), the rest is done without
   * waiting, and stop() rejects. Calling it again returns the same promise; before start() it
   * does nothing.
   */
  stop(timeoutMs: number = STOP_TIMEOUT_MS_DEFAULT): Promise<void> {
    if (this.stopped === undefined) {
      if (this.state === "new") {
        this.state = "stopped";
        this.stopped = Promise.resolve();
      } else {
        this.stopped = this.shutdown(timeoutMs);
      }
    }
    return this.stopped;
  }

  private async shutdown(timeoutMs: number): Promise<void> {
    const began = Date.now();
    const timeout = AbortSignal.timeout(timeoutMs);
    this.accepting = false;
    this.stopping = true;
    this.log.info("stop: refusing new runs", { pending: this.running.size });
    try {
      await this.deregister();
    } catch (err) {
      this.log.warn("stop: cannot deregister", { err: (err as Error).message });
    }
    let gaveUp = "";
    if (!(await this.waitFor(() => this.running.size === 0, timeout))) gaveUp = "runs";
    else if (!(await this.waitFor(() => this.pendingResults === 0, timeout))) gaveUp = "results";
    if (gaveUp !== "") {
      for (const ar of this.running.values()) ar.controller.abort(new ShutdownError());
      this.abandon.abort();
      this.log.warn("stop: gave up waiting; aborted runs and abandoned unsent results", { waiting_for: gaveUp, running: this.running.size, unsent: this.pendingResults });
    }
    this.hbStop.abort();
    await this.hbDone;
    this.sendersClosed = true;
    for (const wake of this.senderWake.splice(0)) wake();
    if (gaveUp === "") await Promise.all(this.senders);
    const server = this.server;
    if (server !== undefined) {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    }
    this.results.close();
    this.ctl.close();
    this.state = "stopped";
    if (gaveUp !== "") throw new Error(`cannot stop gracefully: ${timeoutMs} ms passed while waiting for ${gaveUp}`);
    this.log.info("executor stopped", { took_ms: Date.now() - began });
  }

  /** Resolves true once cond() holds, false if signal aborts first. */
  private waitFor(cond: () => boolean, signal: AbortSignal): Promise<boolean> {
    if (cond()) return Promise.resolve(true);
    if (signal.aborted) return Promise.resolve(false);
    return new Promise((resolve) => {
      const check = () => {
        if (!cond()) return;
        this.watchers.delete(check);
        signal.removeEventListener("abort", onAbort);
        resolve(true);
      };
      const onAbort = () => {
        this.watchers.delete(check);
        resolve(false);
      };
      this.watchers.add(check);
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  private changed(): void {
    for (const w of [...this.watchers]) w();
  }

  private scheme(): "http" | "https" {
    return this.cfg.tlsCert !== undefined ? "https" : "http";
  }

  // ---- scheduler calls: register, heartbeat, deregister ----

  private async register(): Promise<void> {
    const body = JSON.stringify({
      app: this.cfg.app,
      address: this.advertised,
      protocol: this.scheme(),
      handlers: this.handlerNames,
      ...(this.key !== undefined ? { auth: "signed" } : {}),
      version: PROTOCOL_VERSION,
      incarnation: this.incarnation,
    });
    const a = await this.ctl.post(PATH_REGISTER, body);
    if (a.status === 200) {
      let interval = this.cfg.heartbeatIntervalMs;
      try {
        const ans = JSON.parse(a.body) as { heartbeat_interval_ms?: unknown };
        if (typeof ans.heartbeat_interval_ms === "number" && ans.heartbeat_interval_ms > 0) {
          interval = Math.min(interval, ans.heartbeat_interval_ms);
        }
      } catch {
        // an answer without a readable interval keeps ours
      }
      this.hbInterval = interval;
      this.log.info("registered", { address: this.advertised, heartbeat_ms: interval });
      return;
    }
    const why = `cannot register: scheduler answered ${a.status}: ${errorText(a.body)}`;
    if (a.status === 401 || a.status === 403) throw new UnauthorizedError(why);
    if (a.status === 400) throw new RegistrationRejectedError(why);
    throw new Error(why);
  }

  /** "ok", "unknown" (404: register again) or "failed". */
  private async heartbeat(): Promise<"ok" | "unknown" | "failed"> {
    const body = JSON.stringify({ app: this.cfg.app, address: this.advertised, running: this.running.size, incarnation: this.incarnation });
    let a: Answer;
    try {
      a = await this.ctl.post(PATH_HEARTBEAT, body);
    } catch (err) {
      this.log.warn("heartbeat failed", { err: (err as Error).message });
      return "failed";
    }
    if (a.status === 200) return "ok";
    if (a.status === 404) return "unknown";
    this.log.warn("heartbeat failed", { status: a.status, err: errorText(a.body) });
    return "failed";
  }

  private async heartbeatLoop(registered: boolean): Promise<void> {
    const signal = this.hbStop.signal;
    for (;;) {
      try {
        await sleep(this.hbInterval, undefined, { signal });
      } catch {
        return;
      }
      if (registered) {
        const r = await this.heartbeat();
        if (r !== "unknown" || this.stopping) continue;
        this.log.info("the scheduler does not know this executor; registering again");
      }
      if (this.stopping) continue;
      try {
        await this.register();
        registered = true;
      } catch (err) {
        registered = false;
        this.log.warn("cannot register", { err: (err as Error).message });
      }
    }
  }

  /** Deregisters; true when the scheduler confirmed. */
  private async deregister(): Promise<boolean> {
    const body = JSON.stringify({ app: this.cfg.app, address: this.advertised, incarnation: this.incarnation });
    const a = await this.ctl.post(PATH_DEREGISTER, body);
    if (a.status === 200) {
      this.log.info("deregistered", { address: this.advertised });
      return true;
    }
    this.log.warn("stop: the scheduler did not take the deregistration", { status: a.status, err: errorText(a.body) });
    return false;
  }

  // ---- the HTTP server ----

  private serve(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = req.url ?? "";
    const q = url.indexOf("?");
    const path = q < 0 ? url : url.slice(0, q);
    const auth = req.headers.authorization;
    // A caller without a plausible signature may send at most 4 KiB: it is answered 401
    // before more of its body is read.
    const plausible = this.key === undefined || plausibleCall(auth, this.now());
    const limit = plausible ? bodyLimit(path) : MAX_SMALL_BODY;
    const refuse = () => {
      req.pause();
      if (plausible) send(res, 413, { error: `request body over the limit of ${limit} bytes for ${path}` }, true);
      else send(res, 401, { error: BAD_SIGNATURE }, true);
    };
    const length = req.headers["content-length"];
    if (length !== undefined && Number(length) > limit) {
      refuse();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let refused = false;
    req.on("data", (c: Buffer) => {
      if (refused) return;
      size += c.length;
      if (size > limit) {
        refused = true;
        refuse();
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => {
      if (refused) return;
      this.route(req, res, path, Buffer.concat(chunks, size)).catch((err: unknown) => {
        this.log.error("cannot answer a request", { path, err: (err as Error)?.message ?? String(err) });
        if (!res.headersSent) send(res, 500, { error: "internal error" });
      });
    });
    req.on("error", () => res.destroy());
  }

  /** Checks the signature of a read request, then answers it. */
  private async route(req: http.IncomingMessage, res: http.ServerResponse, path: string, body: Buffer): Promise<void> {
    if (this.key !== undefined) {
      const why = this.unauthorized(req, path, body);
      if (why !== undefined) {
        this.log.warn("refused a call without a valid scheduler signature", { path, remote: req.socket.remoteAddress, err: why });
        send(res, 401, { error: why });
        return;
      }
    }
    const method = req.method ?? "";
    const want = path === PATH_BEAT ? "GET" : "POST";
    const known = path === PATH_RUN || path === PATH_RUNS || path === PATH_KILL || path === PATH_BEAT;
    if (!known) {
      send(res, 404, { error: `no endpoint ${path}` });
      return;
    }
    if (method !== want) {
      res.setHeader("allow", want);
      send(res, 405, { error: `use ${want}` });
      return;
    }
    let reply: Reply;
    switch (path) {
      case PATH_RUN:
        reply = await this.onRun(req, body);
        break;
      case PATH_RUNS:
        reply = await this.onRuns(req, body);
        break;
      case PATH_KILL:
        reply = this.onKill(req, body);
        break;
      default:
        reply = [200, { app: this.cfg.app, running: this.running.size, handlers: this.handlerNames }];
    }
    send(res, reply[0], reply[1]);
  }

  /** Why a call is refused 401, or undefined when its signature verifies for this incarnation. */
  private unauthorized(req: http.IncomingMessage, path: string, body: Buffer): string | undefined {
    const auth = req.headers.authorization;
    if (path === PATH_BEAT && auth !== undefined && this.ownAuth !== undefined) {
      const a = Buffer.from(auth, "utf8");
      if (a.length === this.ownAuth.length && timingSafeEqual(a, this.ownAuth)) return undefined;
    }
    const incarnation = header(req, HEADER_INCARNATION);
    if (incarnation === undefined) return `${BAD_SIGNATURE}: no X-Axe-Incarnation header`;
    const why = verifyCall(this.key!, auth, {
      address: this.advertised, path, epoch: header(req, HEADER_EPOCH) ?? "", incarnation, body,
    }, this.now());
    if (why !== undefined) return why;
    if (incarnation !== this.incarnation) return `${BAD_SIGNATURE}: signed for another incarnation of this executor`;
    return undefined;
  }

  private async onRun(req: http.IncomingMessage, body: Buffer): Promise<Reply> {
    let run: RunRequest;
    try {
      run = decodeRun(body);
      checkRunHeaders(req, run);
      run.epoch = requestEpoch(header(req, HEADER_EPOCH), run.epoch);
    } catch (err) {
      if (err instanceof FieldError) return [400, { error: err.message }];
      throw err;
    }
    return this.admit(run);
  }

  private async onRuns(req: http.IncomingMessage, body: Buffer): Promise<Reply> {
    let runs: Array<RunRequest | FieldError>;
    const epochHeader = header(req, HEADER_EPOCH);
    try {
      runs = decodeRuns(body);
      requestEpoch(epochHeader, 0);
    } catch (err) {
      if (err instanceof FieldError) return [400, { error: err.message }];
      throw err;
    }
    const results: Array<{ code: number; body: object }> = [];
    // In order, each as /axe/run would: a run that raises its shard's epoch holds the later
    // runs of that shard in the same batch to it.
    for (const r of runs) {
      let run = r;
      if (!(run instanceof FieldError)) {
        try {
          run.epoch = requestEpoch(epochHeader, run.epoch);
        } catch (err) {
          if (!(err instanceof FieldError)) throw err;
          run = err;
        }
      }
      if (run instanceof FieldError) {
        results.push({ code: 400, body: { error: run.message } });
        continue;
      }
      const [code, answer] = await this.admit(run);
      results.push({ code, body: answer });
    }
    return [200, { results }];
  }

  private onKill(req: http.IncomingMessage, body: Buffer): Reply {
    let ticket: string;
    let epoch: number;
    let shard: number | undefined;
    try {
      ({ ticket, epoch, shard } = decodeKill(body));
      epoch = requestEpoch(header(req, HEADER_EPOCH), epoch);
    } catch (err) {
      if (err instanceof FieldError) return [400, { error: err.message }];
      throw err;
    }
    const stale = this.staleEpoch(epoch, shard);
    if (stale !== undefined) return stale;
    const ar = this.running.get(ticket);
    if (ar === undefined) return [404, { error: `ticket ${JSON.stringify(ticket)} is not running here` }];
    ar.controller.abort(new KilledError());
    this.log.info("run killed", { ticket, task: ar.run.task });
    return [200, { killed: true }];
  }

  // ---- admission ----

  /** Decides what /axe/run answers, and accepts the run when it says 202. */
  private async admit(run: RunRequest): Promise<Reply> {
    const stale = this.staleEpoch(run.epoch, run.shard);
    if (stale !== undefined) return stale;
    if (!this.accepting) return [503, { error: "executor is stopping" }];
    if (this.running.has(run.ticket)) return [202, { accepted: true, duplicate: true }];
    let finished = this.finishedReply(run.ticket);
    if (finished !== undefined) return finished;
    let remembered: FinishedRun | undefined;
    try {
      const got = this.store.get(run.ticket, this.now());
      remembered = isPromise(got) ? await got : got;
    } catch (err) {
      this.log.error("cannot look a ticket up in the dedup store", { ticket: run.ticket, err: (err as Error).message });
      return [500, { error: `cannot look the ticket up: ${(err as Error).message}` }];
    }
    // The store may have answered later: judge what changed meanwhile.
    if (!this.accepting) return [503, { error: "executor is stopping" }];
    if (this.running.has(run.ticket)) return [202, { accepted: true, duplicate: true }];
    finished = this.finishedReply(run.ticket);
    if (finished !== undefined) return finished;
    if (remembered !== undefined) {
      // The scheduler asks again for a ticket that finished: it most likely never got the
      // result, so it is sent again.
      const o: Outcome = { ticket: run.ticket, status: remembered.status, error: remembered.error, body: remembered.result, again: false };
      this.delivering.set(o.ticket, o);
      this.pendingResults++;
      this.enqueue(o);
      return [200, { duplicate: true, status: o.status, error: o.error }];
    }
    const handler = this.handlers.get(run.handler);
    if (handler === undefined) return [404, { error: `unknown handler ${JSON.stringify(run.handler)}` }];
    const other = this.tasks.get(run.task);
    if (other !== undefined && !run.parallel) {
      return [409, { error: `task ${JSON.stringify(run.task)} is already running here with ticket ${JSON.stringify(other)}` }];
    }
    if (this.running.size >= this.cfg.poolSize + this.cfg.queueSize) return [429, { error: "busy" }];

    const ar: ActiveRun = { run, handler, controller: new AbortController(), timer: undefined, started: false, done: false };
    this.running.set(run.ticket, ar);
    if (!run.parallel) this.tasks.set(run.task, run.ticket); // a parallel run is no run another waits for
    ar.controller.signal.addEventListener("abort", () => this.aborted(ar), { once: true });
    if (run.deadline > 0) this.armDeadline(ar);
    if (!ar.done) {
      if (this.active < this.cfg.poolSize) this.launch(ar);
      else this.waiting.push(ar);
    }
    this.log.debug("run accepted", { ticket: run.ticket, task: run.task, attempt: run.attempt });
    return [202, { accepted: true }];
  }

  /** The 200 of a ticket whose result is being delivered, asking for one more delivery. */
  private finishedReply(ticket: string): Reply | undefined {
    const o = this.delivering.get(ticket);
    if (o === undefined) return undefined;
    o.again = true;
    return [200, { duplicate: true, status: o.status, error: o.error }];
  }

  /**
   * Records epoch (of shard, or of the single primary), and returns the 409 refusing it when
   * it is below the highest seen of the same. An epoch of 0 is no HA: neither judged nor recorded.
   */
  private staleEpoch(epoch: number, shard: number | undefined): Reply | undefined {
    if (epoch === 0) return undefined;
    if (shard === undefined) {
      if (epoch < this.highestEpoch) {
        this.log.warn("refused a call of a stale scheduler epoch", { epoch, highest: this.highestEpoch });
        return [409, { error: `stale epoch ${epoch} < ${this.highestEpoch}` }];
      }
      this.highestEpoch = epoch;
      return undefined;
    }
    const highest = this.shardEpochs.get(shard) ?? 0;
    if (epoch < highest) {
      this.log.warn("refused a call of a stale shard epoch", { shard, epoch, highest });
      return [409, { error: `stale epoch ${epoch} < ${highest} of shard ${shard}` }];
    }
    this.shardEpochs.set(shard, epoch);
    return undefined;
  }

  private armDeadline(ar: ActiveRun): void {
    const left = ar.run.deadline - Date.now(); // deadlines are wall-clock times from the scheduler
    if (left <= 0) {
      ar.controller.abort(new DeadlineError());
      return;
    }
    ar.timer = setTimeout(() => this.armDeadline(ar), Math.min(left, MAX_TIMER_MS));
  }

  /** A run's signal aborted: a queued run leaves the queue and is reported at once. */
  private aborted(ar: ActiveRun): void {
    if (ar.started || ar.done) return;
    const i = this.waiting.indexOf(ar);
    if (i >= 0) this.waiting.splice(i, 1);
    const now = this.now();
    this.finish(ar, "failed", `handler not started: ${reasonText(ar.controller.signal.reason)}`, "", now, now);
  }

  private launch(ar: ActiveRun): void {
    ar.started = true;
    this.active++;
    // After the answer: a handler that works synchronously before its first await does not
    // delay the 202.
    setImmediate(() => void this.execute(ar));
  }

  private async execute(ar: ActiveRun): Promise<void> {
    const started = this.now();
    let status: "success" | "failed" = "success";
    let error = "";
    let output = "";
    const signal = ar.controller.signal;
    if (signal.aborted) {
      status = "failed";
      error = `handler not started: ${reasonText(signal.reason)}`;
    } else {
      const r = ar.run;
      const ctx: RunContext = Object.freeze({
        ticket: r.ticket, task: r.task, handler: r.handler, group: r.group, kind: r.kind, attempt: r.attempt,
        params: r.params, paramsJSON: r.paramsJSON,
        scheduledAt: r.scheduledAt > 0 ? new Date(r.scheduledAt) : undefined,
        deadline: r.deadline > 0 ? new Date(r.deadline) : undefined,
        epoch: r.epoch, signal,
      });
      try {
        output = outputText(await ar.handler(ctx));
      } catch (err) {
        status = "failed";
        error = reasonText(err);
      }
    }
    const ended = this.now();
    this.active--;
    this.finish(ar, status, error, output, started, ended);
    while (this.active < this.cfg.poolSize && this.waiting.length > 0) this.launch(this.waiting.shift()!);
  }

  /** Records a run's outcome, frees its ticket and task, and starts delivering its result. */
  private finish(ar: ActiveRun, status: "success" | "failed", error: string, output: string, started: number, ended: number): void {
    if (ar.done) return;
    ar.done = true;
    clearTimeout(ar.timer);
    const r = ar.run;
    if (status === "failed") error = clipStart(error.toWellFormed(), MAX_ERROR_BYTES) || "handler failed";
    const result: ResultBody = {
      ticket: r.ticket, task: r.task, app: this.cfg.app, address: this.advertised,
      status, error, output: clipTail(output.toWellFormed(), this.cfg.outputLimit),
      started_at: started, ended_at: ended, duration_ms: Math.max(0, ended - started),
    };
    const body = JSON.stringify(result);
    const o: Outcome = { ticket: r.ticket, status, error, body, again: false };
    this.running.delete(r.ticket);
    if (this.tasks.get(r.task) === r.ticket) this.tasks.delete(r.task);
    this.delivering.set(r.ticket, o);
    this.pendingResults++;
    const rec: FinishedRun = { status, error, result: body, expiresAt: ended + (r.dedupTtlMs > 0 ? r.dedupTtlMs : this.cfg.dedupTtlMs) };
    try {
      const p = this.store.put(r.ticket, rec, ended);
      if (isPromise(p)) p.catch((err: unknown) => this.log.error("cannot remember a finished ticket", { ticket: r.ticket, err: (err as Error)?.message }));
    } catch (err) {
      this.log.error("cannot remember a finished ticket", { ticket: r.ticket, err: (err as Error).message });
    }
    if (status === "failed") this.log.info("run failed", { ticket: r.ticket, task: r.task, attempt: r.attempt, error, duration_ms: result.duration_ms });
    else this.log.debug("run finished", { ticket: r.ticket, task: r.task, attempt: r.attempt, duration_ms: result.duration_ms });
    this.enqueue(o);
    this.changed();
  }

  // ---- result delivery ----
  //
  // Finished runs queue their result in the outbox; resultSenders loops take what is queued
  // and post it: one result alone to /api/v1/callback, several (a burst finishing while the
  // senders wait on the scheduler) together to /api/v1/callback/batch. Each is re-sent with
  // doubling backoff until the scheduler acknowledges it (200) or finally refuses it (400,
  // 404, 409).

  private enqueue(o: Outcome): void {
    this.outbox.push(o);
    this.senderWake.shift()?.();
  }

  private async sender(): Promise<void> {
    for (;;) {
      const batch = await this.take();
      if (batch === undefined) return;
      await this.deliver(batch);
    }
  }

  private async take(): Promise<Outcome[] | undefined> {
    for (;;) {
      if (this.outbox.length > 0) {
        let n = 0;
        let size = 0;
        while (n < this.outbox.length && n < RESULT_BATCH_MAX) {
          size += this.outbox[n]!.body.length + 1;
          if (n > 0 && size > RESULT_BATCH_BYTES) break;
          n++;
        }
        const batch = this.outbox.splice(0, n);
        if (this.outbox.length > 0) this.senderWake.shift()?.();
        return batch;
      }
      if (this.sendersClosed) return undefined;
      await new Promise<void>((resolve) => this.senderWake.push(resolve));
    }
  }

  private async deliver(batch: Outcome[]): Promise<void> {
    let wait = this.cfg.resendMinMs;
    for (let attempt = 1; ; attempt++) {
      if (this.abandon.signal.aborted) {
        this.log.warn("abandoned unsent results", { results: batch.length, attempt });
        for (const o of batch) this.endDelivery(o);
        return;
      }
      const retry = batch.length === 1 ? await this.postOne(batch[0]!, attempt, wait) : await this.postBatch(batch, attempt, wait);
      if (retry.length === 0) return;
      batch = retry;
      try {
        await sleep(wait, undefined, { signal: this.abandon.signal });
      } catch {
        // abandoned: the loop's check ends it
      }
      wait = Math.min(2 * wait, this.cfg.resendMaxMs);
    }
  }

  private async postOne(o: Outcome, attempt: number, wait: number): Promise<Outcome[]> {
    let a: Answer;
    try {
      a = await this.results.post(PATH_CALLBACK, o.body);
    } catch (err) {
      this.log.warn("cannot deliver a result", { ticket: o.ticket, attempt, retry_in_ms: wait, err: (err as Error).message });
      return [o];
    }
    return this.settle(o, a.status, a.status === 200 ? "" : errorText(a.body), attempt, wait) ? [o] : [];
  }

  private async postBatch(batch: Outcome[], attempt: number, wait: number): Promise<Outcome[]> {
    const body = `{"results":[${batch.map((o) => o.body).join(",")}]}`;
    let a: Answer;
    try {
      a = await this.results.post(PATH_CALLBACK_BATCH, body);
    } catch (err) {
      this.log.warn("cannot deliver results", { results: batch.length, attempt, retry_in_ms: wait, err: (err as Error).message });
      return batch;
    }
    if (a.status !== 200) {
      this.log.warn("cannot deliver results", { results: batch.length, attempt, retry_in_ms: wait, status: a.status, err: errorText(a.body) });
      return batch;
    }
    let items: Array<{ status?: unknown; error?: unknown }> | undefined;
    try {
      const ans = JSON.parse(a.body) as { results?: unknown };
      if (Array.isArray(ans.results) && ans.results.length === batch.length) items = ans.results as typeof items;
    } catch {
      // unreadable: re-sent whole below; results are idempotent by ticket at the scheduler
    }
    if (items === undefined) {
      this.log.warn("cannot read the scheduler's answer to a batch; re-sending it", { results: batch.length, attempt });
      return batch;
    }
    const retry: Outcome[] = [];
    batch.forEach((o, i) => {
      const item = items![i] ?? {};
      const status = typeof item.status === "number" ? item.status : 0;
      if (this.settle(o, status, typeof item.error === "string" ? item.error : "", attempt, wait)) retry.push(o);
    });
    return retry;
  }

  /** Acts on the scheduler's answer to one result; true when it must be sent again. */
  private settle(o: Outcome, status: number, errText: string, attempt: number, wait: number): boolean {
    switch (status) {
      case 200:
        break;
      case 400:
      case 404:
      case 409:
        this.log.warn("the scheduler refused a result; not re-sending it", { ticket: o.ticket, status, err: errText });
        break;
      default:
        this.log.warn("cannot deliver a result", { ticket: o.ticket, attempt, retry_in_ms: wait, status, err: errText });
        return true;
    }
    if (o.again && !this.abandon.signal.aborted) {
      o.again = false;
      this.enqueue(o);
    } else {
      this.endDelivery(o);
    }
    return false;
  }

  private endDelivery(o: Outcome): void {
    if (this.delivering.get(o.ticket) === o) this.delivering.delete(o.ticket);
    this.pendingResults--;
    this.changed();
  }
}

// ---- helpers ----

function withDefaults(o: ExecutorOptions): Config {
  const cpus = availableParallelism();
  return {
    app: o.app,
    schedulers: (o.schedulers ?? []).map((s) => s.trim().replace(/\/+$/, "")),
    listen: o.listen ?? LISTEN_DEFAULT,
    advertise: o.advertise,
    token: o.token ?? "",
    insecureNoAuth: o.insecureNoAuth ?? false,
    tlsCert: o.tlsCert,
    tlsKey: o.tlsKey,
    tlsClientCA: o.tlsClientCA,
    schedulerCA: o.schedulerCA,
    heartbeatIntervalMs: o.heartbeatIntervalMs ?? HEARTBEAT_INTERVAL_MS_DEFAULT,
    poolSize: o.poolSize ?? POOL_SIZE_PER_CPU_DEFAULT * cpus,
    queueSize: o.queueSize ?? QUEUE_SIZE_DEFAULT,
    dedupTtlMs: o.dedupTtlMs ?? DEDUP_TTL_MS_DEFAULT,
    dedupStore: o.dedupStore ?? new MemoryDedupStore(),
    resendMinMs: o.resendMinMs ?? RESEND_MIN_MS_DEFAULT,
    resendMaxMs: o.resendMaxMs ?? RESEND_MAX_MS_DEFAULT,
    requestTimeoutMs: o.requestTimeoutMs ?? REQUEST_TIMEOUT_MS_DEFAULT,
    resultSenders: o.resultSenders ?? RESULT_SENDERS_DEFAULT,
    outputLimit: o.outputLimit ?? OUTPUT_LIMIT_DEFAULT,
    logger: o.logger ?? consoleLogger("info"),
    now: o.now ?? Date.now,
  };
}

function validate(c: Config): void {
  const bad = (field: string, why: string): never => {
    throw new ConfigError(`${field}: ${why}`);
  };
  if (typeof c.app !== "string" || c.app === "") bad("app", "required");
  if (Buffer.byteLength(c.app) > MAX_NAME_BYTES || /\s/.test(c.app)) bad("app", `must be at most ${MAX_NAME_BYTES} bytes without whitespace`);
  if (c.schedulers.length === 0) bad("schedulers", "at least one scheduler URL is required");
  c.schedulers.forEach((s, i) => {
    try {
      parseSchedulerURL(s);
    } catch (err) {
      bad(`schedulers[${i}]`, (err as Error).message);
    }
  });
  const positive: Array<[string, number]> = [
    ["heartbeatIntervalMs", c.heartbeatIntervalMs], ["poolSize", c.poolSize], ["resendMinMs", c.resendMinMs],
    ["requestTimeoutMs", c.requestTimeoutMs], ["resultSenders", c.resultSenders], ["outputLimit", c.outputLimit],
  ];
  for (const [name, v] of positive) if (!Number.isInteger(v) || v <= 0) bad(name, `must be a positive integer, got ${v}`);
  if (!Number.isInteger(c.queueSize) || c.queueSize < 0) bad("queueSize", `must be a non-negative integer, got ${c.queueSize}`);
  if (!Number.isInteger(c.dedupTtlMs) || c.dedupTtlMs <= 0 || c.dedupTtlMs > 30 * 24 * 3600 * 1000) bad("dedupTtlMs", "must be between 1 ms and 30 days");
  if (!Number.isInteger(c.resendMaxMs) || c.resendMaxMs < c.resendMinMs) bad("resendMaxMs", "must not be below resendMinMs");
  if (c.outputLimit > MAX_OUTPUT_BYTES) bad("outputLimit", `at most ${MAX_OUTPUT_BYTES} bytes, the largest output the scheduler takes`);
  let host: string;
  try {
    ({ host } = splitHostPort(c.listen));
  } catch (err) {
    return bad("listen", (err as Error).message);
  }
  if (c.token === "" && !c.insecureNoAuth && !isLoopback(host)) {
    bad("listen", `${c.listen} listens beyond this machine without a token: anyone who can reach it could run the handlers; set token, listen on 127.0.0.1, or set insecureNoAuth`);
  }
  if ((c.tlsCert === undefined) !== (c.tlsKey === undefined)) bad("tlsCert", "tlsCert and tlsKey go together");
  if (c.tlsClientCA !== undefined && c.tlsCert === undefined) bad("tlsClientCA", "verifies client certificates of an HTTPS listener: set tlsCert and tlsKey too");
  if (c.advertise !== undefined) {
    let a: { host: string; port: number };
    try {
      a = splitHostPort(c.advertise);
    } catch (err) {
      return bad("advertise", (err as Error).message);
    }
    if (a.port === 0) bad("advertise", `${c.advertise} has no port`);
    if (a.host === "" || isWildcard(a.host)) bad("advertise", `${c.advertise} is a wildcard address the scheduler cannot dial`);
  }
}

/** Splits "host:port" ("[::1]:9100" for IPv6). */
export function splitHostPort(s: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]*)\]|([^:[\]]*)):([0-9]{1,5})$/.exec(s);
  if (m === null) throw new Error(`${JSON.stringify(s)} is not host:port`);
  const port = Number(m[3]);
  if (port > 65535) throw new Error(`${JSON.stringify(s)}: port out of range`);
  return { host: m[1] ?? m[2] ?? "", port };
}

function joinHostPort(host: string, port: number): string {
  return isIP(host) === 6 ? `[${host}]:${port}` : `${host}:${port}`;
}

function isWildcard(host: string): boolean {
  return host === "" || host === "0.0.0.0" || host === "::" || host === "[::]";
}

function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host) || host === "::ffff:127.0.0.1";
}

function bodyLimit(path: string): number {
  switch (path) {
    case PATH_RUN:
      return MAX_RUN_BODY;
    case PATH_RUNS:
      return MAX_RUNS_BODY;
    default:
      return MAX_SMALL_BODY;
  }
}

function header(req: http.IncomingMessage, name: string): string | undefined {
  const v = req.headers[name.toLowerCase()];
  return Array.isArray(v) ? v.join(", ") : v;
}

/** The epoch a call carries: the body's, else the X-Axe-Epoch header's; a header contradicting the body is refused. */
function requestEpoch(raw: string | undefined, body: number): number {
  if (raw === undefined || raw === "") return body;
  const n = Number(raw);
  if (!/^[0-9]+$/.test(raw) || !Number.isSafeInteger(n)) {
    throw new FieldError("epoch", `header X-Axe-Epoch must be a non-negative integer, got ${JSON.stringify(raw.slice(0, 40))}`);
  }
  if (body !== 0 && body !== n) throw new FieldError("epoch", `header X-Axe-Epoch is ${n} but the body says ${body}`);
  return n;
}

/** Refuses X-Axe-* headers that contradict the body (the body is authoritative). */
function checkRunHeaders(req: http.IncomingMessage, run: RunRequest): void {
  const checks: Array<[string, string, string]> = [
    [HEADER_TICKET, "ticket", run.ticket],
    [HEADER_TASK, "task", run.task],
    [HEADER_ATTEMPT, "attempt", String(run.attempt)],
  ];
  for (const [name, field, want] of checks) {
    const got = header(req, name);
    if (got !== undefined && got !== "" && got !== want) {
      throw new FieldError(field, `header ${name} is ${JSON.stringify(got.slice(0, 300))} but the body says ${JSON.stringify(want)}`);
    }
  }
}

function send(res: http.ServerResponse, status: number, body: object, close = false): void {
  const text = JSON.stringify(body);
  const headers: Record<string, string | number> = { "content-type": "application/json", "content-length": Buffer.byteLength(text) };
  if (close) headers.connection = "close";
  res.writeHead(status, headers);
  res.end(text);
}

function isPromise<T>(v: T | Promise<T>): v is Promise<T> {
  return typeof (v as { then?: unknown } | undefined)?.then === "function";
}

/** The text of an error or abort reason. */
function reasonText(err: unknown): string {
  if (err instanceof Error) return err.message !== "" ? err.message : err.name;
  if (typeof err === "string") return err;
  try {
    return JSON.stringify(err) ?? String(err);
  } catch {
    return String(err);
  }
}

/** A handler's value as output text: a string as is, bytes as UTF-8, undefined as nothing, else JSON. */
function outputText(v: unknown): string {
  if (v === undefined) return "";
  if (typeof v === "string") return v;
  if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("utf8");
  let text: string | undefined;
  try {
    text = JSON.stringify(v);
  } catch (err) {
    throw new Error(`cannot encode the handler's result as JSON: ${(err as Error).message}`);
  }
  return text ?? "";
}


