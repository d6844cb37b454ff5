// Calls to the scheduler with failover (docs/protocol.md, "Failover"). A call starts with the
// address that answered last; a connection error or a 503 moves it on to the next address
// (or first to the primary a backup's 503 names, when that is one of the configured
// addresses); any other status is that scheduler's answer. Each address is tried at most once
// per call.

import * as http from "node:http";
import * as https from "node:https";
import { NoSchedulerError } from "./errors.js";
import type { Logger } from "./log.js";

/** The largest answer read from a scheduler; its answers are small JSON objects. */
const MAX_ANSWER_BYTES = 1 << 20;

export interface Answer {
  status: number;
  body: string;
}

interface Target {
  base: string; // scheme://host[:port]
  url: URL;
  agent: http.Agent;
}

/** Parses one scheduler base URL, or says why it is not one. */
export function parseSchedulerURL(s: string): URL {
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    throw new Error(`cannot parse ${JSON.stringify(s)}`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error(`${JSON.stringify(s)}: scheme must be http or https`);
  if (u.hostname === "") throw new Error(`${JSON.stringify(s)}: host is required`);
  if ((u.pathname !== "/" && u.pathname !== "") || u.search !== "" || u.hash !== "" || u.username !== "" || u.password !== "") {
    throw new Error(`${JSON.stringify(s)}: must be scheme://host[:port] only`);
  }
  return u;
}

function hostKey(u: URL): string {
  return `${u.protocol}//${u.hostname}:${u.port || (u.protocol === "https:" ? "443" : "80")}`;
}

export class SchedulerClient {
  private readonly targets: Target[];
  private current = 0;

  constructor(
    schedulers: string[],
    private readonly token: string,
    private readonly timeoutMs: number,
    ca: string | Buffer | Array<string | Buffer> | undefined,
    private readonly log: Logger,
  ) {
    this.targets = schedulers.map((s) => {
      const url = parseSchedulerURL(s.trim().replace(/\/+$/, ""));
      const agent =
        url.protocol === "https:"
          ? new https.Agent({ keepAlive: true, ...(ca !== undefined ? { ca } : {}), minVersion: "TLSv1.2" })
          : new http.Agent({ keepAlive: true });
      return { base: url.origin, url, agent };
    });
  }

  /** Posts body to path on the first scheduler that answers anything but 503. */
  async post(path: string, body: string): Promise<Answer> {
    const start = this.current;
    const tried = new Set<number>();
    let idx = start;
    let last = "";
    for (let n = 0; n < this.targets.length; n++) {
      const t = this.targets[idx]!;
      let next = -1;
      try {
        const a = await this.postTo(t, path, body);
        if (a.status !== 503) {
          if (idx !== this.current && this.current === start) {
            this.current = idx;
            this.log.info("following scheduler", { scheduler: t.base });
          }
          return a;
        }
        last = `scheduler ${t.base} answered ${path} with 503: ${errorText(a.body)}`;
        next = this.indexOf(primaryOf(a.body));
      } catch (err) {
        last = `cannot reach scheduler ${t.base}: ${(err as Error).message}`;
      }
      tried.add(idx);
      if (next < 0 || tried.has(next)) {
        next = -1;
        for (let i = 1; i < this.targets.length; i++) {
          const j = (idx + i) % this.targets.length;
          if (!tried.has(j)) {
            next = j;
            break;
          }
        }
      }
      if (next < 0) break;
      idx = next;
    }
    throw new NoSchedulerError(last);
  }

  private indexOf(base: string): number {
    if (base === "") return -1;
    let u: URL;
    try {
      u = parseSchedulerURL(base.replace(/\/+$/, ""));
    } catch {
      return -1;
    }
    const want = hostKey(u);
    return this.targets.findIndex((t) => hostKey(t.url) === want);
  }

  private postTo(t: Target, path: string, body: string): Promise<Answer> {
    return new Promise((resolve, reject) => {
      const payload = Buffer.from(body, "utf8");
      const headers: Record<string, string | number> = {
        "content-type": "application/json",
        "content-length": payload.length,
      };
      if (this.token !== "") headers.authorization = `Bearer ${this.token}`;
      const req = (t.url.protocol === "https:" ? https : http).request(
        new URL(path, t.base),
        { method: "POST", agent: t.agent, headers, signal: AbortSignal.timeout(this.timeoutMs) },
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on("data", (c: Buffer) => {
            size += c.length;
            if (size > MAX_ANSWER_BYTES) {
              res.destroy(new Error(`answer over ${MAX_ANSWER_BYTES} bytes`));
              return;
            }
            chunks.push(c);
          });
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
          res.on("error", reject);
        },
      );
      req.on("error", reject);
      req.end(payload);
    });
  }

  /** Drops kept-alive connections. */
  close(): void {
    for (const t of this.targets) t.agent.destroy();
  }
}

/** The "error" of an error body, else the start of the body. */
export function errorText(body: string): string {
  try {
    const v = JSON.parse(body) as { error?: unknown };
    if (typeof v?.error === "string" && v.error !== "") return v.error;
  } catch {
    // not JSON: quote it
  }
  return body.length > 200 ? body.slice(0, 200) : body;
}

function primaryOf(body: string): string {
  try {
    const v = JSON.parse(body) as { primary?: unknown };
    return typeof v?.primary === "string" ? v.primary : "";
  } catch {
    return "";
  }
}
