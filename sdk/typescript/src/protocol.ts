// The executor protocol's messages, as this SDK reads and writes them (docs/protocol.md).
// Reading is tolerant of members it does not know (a field the scheduler adds never breaks a
// deployed executor) and strict about everything else: one JSON object, no repeated key,
// valid UTF-8, known fields of the right type and size, required fields present.

import { FieldError, type JsonNode, compactText, fieldPath, kindName, parseStrict, toValue } from "./json.js";

/** The protocol version this SDK speaks (sent at registration). */
export const PROTOCOL_VERSION = 2;

export const PATH_REGISTER = "/api/v1/executors/register";
export const PATH_HEARTBEAT = "/api/v1/executors/heartbeat";
export const PATH_DEREGISTER = "/api/v1/executors/deregister";
export const PATH_CALLBACK = "/api/v1/callback";
export const PATH_CALLBACK_BATCH = "/api/v1/callback/batch";
export const PATH_RUN = "/axe/run";
export const PATH_RUNS = "/axe/runs";
export const PATH_KILL = "/axe/kill";
export const PATH_BEAT = "/axe/beat";

export const HEADER_TASK = "X-Axe-Task";
export const HEADER_TICKET = "X-Axe-Ticket";
export const HEADER_ATTEMPT = "X-Axe-Attempt";
export const HEADER_EPOCH = "X-Axe-Epoch";
export const HEADER_INCARNATION = "X-Axe-Incarnation";

/** Bounds an app, a task, a handler, a group, a kind and a ticket, in UTF-8 bytes. */
export const MAX_NAME_BYTES = 256;
/** The largest output a result may carry. */
export const MAX_OUTPUT_BYTES = 1 << 20;
/** The largest error text a result may carry (the SDK keeps its start). */
export const MAX_ERROR_BYTES = 64 << 10;
/** The most runs one /axe/runs call may carry. */
export const MAX_RUNS_PER_CALL = 1000;
/** The number of shards of a scale-out cluster; a run's shard is 0 to SHARD_COUNT-1. */
export const SHARD_COUNT = 256;
/** The longest dedup_ttl_ms a run may ask for: 30 days. */
export const MAX_DEDUP_TTL_MS = 30 * 24 * 3600 * 1000;

/** Request body limits of the executor's endpoints. */
export const MAX_RUN_BODY = 1 << 20;
export const MAX_RUNS_BODY = 4 << 20;
export const MAX_SMALL_BODY = 4 << 10;

/** One run as the scheduler sent it, checked. */
export interface RunRequest {
  ticket: string;
  task: string;
  handler: string;
  group: string;
  kind: string;
  attempt: number;
  scheduledAt: number;
  deadline: number;
  /** The params as a JavaScript value; undefined when the run has none (absent or null). */
  params: unknown;
  /** The params' JSON text, compacted; undefined when the run has none. */
  paramsJSON: string | undefined;
  dedupTtlMs: number;
  epoch: number;
  shard: number | undefined;
  parallel: boolean;
}

/** A kill as the scheduler sent it, checked. */
export interface KillRequest {
  ticket: string;
  epoch: number;
  shard: number | undefined;
}

function bytes(s: string): number {
  return Buffer.byteLength(s, "utf8");
}

/** Reads the known members of one object, by type; unknown members are left alone. */
class Fields {
  constructor(
    readonly node: Extract<JsonNode, { kind: "object" }>,
    readonly prefix: string,
  ) {}

  private get(name: string, required: boolean): JsonNode | undefined {
    const v = this.node.members.get(name);
    if (v === undefined && required) throw new FieldError(fieldPath(this.prefix, name), "required");
    return v;
  }

  string(name: string, required: boolean, maxBytes: number): string {
    const v = this.get(name, required);
    if (v === undefined) return "";
    if (v.kind !== "string") throw new FieldError(fieldPath(this.prefix, name), `must be a string, got ${kindName(v)}`);
    if (required && v.value === "") throw new FieldError(fieldPath(this.prefix, name), "required");
    if (bytes(v.value) > maxBytes) throw new FieldError(fieldPath(this.prefix, name), `longer than ${maxBytes} bytes`);
    return v.value;
  }

  int(name: string, required: boolean, min: number, max: number): number | undefined {
    const v = this.get(name, required);
    if (v === undefined) return undefined;
    const field = fieldPath(this.prefix, name);
    if (v.kind !== "number") throw new FieldError(field, `must be an integer, got ${kindName(v)}`);
    if (!/^-?(0|[1-9][0-9]*)$/.test(v.raw)) throw new FieldError(field, `must be an integer, got ${v.raw}`);
    const n = Number(v.raw);
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      throw new FieldError(field, `must be between ${min} and ${max}, got ${v.raw}`);
    }
    return n;
  }

  bool(name: string): boolean {
    const v = this.get(name, false);
    if (v === undefined) return false;
    if (v.kind !== "bool") throw new FieldError(fieldPath(this.prefix, name), `must be a bool, got ${kindName(v)}`);
    return v.value;
  }
}

function asObject(node: JsonNode, field: string): Extract<JsonNode, { kind: "object" }> {
  if (node.kind !== "object") {
    throw new FieldError(field, field === "" ? `invalid JSON: the body must be a JSON object, got ${kindName(node)}` : `must be an object, got ${kindName(node)}`);
  }
  return node;
}

/** Checks one run (a body's node) as /axe/run reads it. */
export function runFromNode(text: string, node: JsonNode): RunRequest {
  const f = new Fields(asObject(node, ""), "");
  const ticket = f.string("ticket", true, MAX_NAME_BYTES);
  const task = f.string("task", true, MAX_NAME_BYTES);
  const attempt = f.int("attempt", true, 1, Number.MAX_SAFE_INTEGER)!;
  const deadline = f.int("deadline", true, 0, Number.MAX_SAFE_INTEGER)!;
  const run: RunRequest = {
    ticket,
    task,
    attempt,
    deadline,
    handler: f.string("handler", false, MAX_NAME_BYTES),
    group: f.string("group", false, MAX_NAME_BYTES),
    kind: f.string("kind", false, MAX_NAME_BYTES),
    scheduledAt: f.int("scheduled_at", false, 0, Number.MAX_SAFE_INTEGER) ?? 0,
    // A longer memory than the executor keeps is its own policy: held to MAX_DEDUP_TTL_MS.
    dedupTtlMs: Math.min(f.int("dedup_ttl_ms", false, 0, Number.MAX_SAFE_INTEGER) ?? 0, MAX_DEDUP_TTL_MS),
    epoch: f.int("epoch", false, 0, Number.MAX_SAFE_INTEGER) ?? 0,
    shard: f.int("shard", false, 0, SHARD_COUNT - 1),
    parallel: f.bool("parallel"),
    params: undefined,
    paramsJSON: undefined,
  };
  const params = node.kind === "object" ? node.members.get("params") : undefined;
  if (params !== undefined && params.kind !== "null") {
    run.params = toValue(params);
    run.paramsJSON = compactText(text, params);
  }
  return run;
}

/** Reads a POST /axe/run body. */
export function decodeRun(body: Uint8Array): RunRequest {
  const { text, node } = parseStrict(body);
  return runFromNode(text, node);
}

/**
 * Reads a POST /axe/runs body. A body that is not strict JSON, or not an object with 1 to
 * MAX_RUNS_PER_CALL runs, throws (the whole call is refused); each run is judged alone, so a
 * run of the wrong shape is a FieldError in its place and refuses only itself.
 */
export function decodeRuns(body: Uint8Array): Array<RunRequest | FieldError> {
  const { text, node } = parseStrict(body);
  const obj = asObject(node, "");
  const runs = obj.members.get("runs");
  if (runs === undefined) throw new FieldError("runs", "required (one or more runs)");
  if (runs.kind !== "array") throw new FieldError("runs", `must be an array, got ${kindName(runs)}`);
  if (runs.items.length === 0) throw new FieldError("runs", "required (one or more runs)");
  if (runs.items.length > MAX_RUNS_PER_CALL) {
    throw new FieldError("runs", `at most ${MAX_RUNS_PER_CALL} per call, got ${runs.items.length}`);
  }
  return runs.items.map((item) => {
    try {
      return runFromNode(text, item);
    } catch (err) {
      if (err instanceof FieldError) return err;
      throw err;
    }
  });
}

/** Reads a POST /axe/kill body. */
export function decodeKill(body: Uint8Array): KillRequest {
  const { node } = parseStrict(body);
  const f = new Fields(asObject(node, ""), "");
  return {
    ticket: f.string("ticket", true, MAX_NAME_BYTES),
    epoch: f.int("epoch", false, 0, Number.MAX_SAFE_INTEGER) ?? 0,
    shard: f.int("shard", false, 0, SHARD_COUNT - 1),
  };
}

/** The result of one run, as posted to /api/v1/callback. */
export interface ResultBody {
  ticket: string;
  task: string;
  app: string;
  address: string;
  status: "success" | "failed";
  error: string;
  output: string;
  started_at: number;
  ended_at: number;
  duration_ms: number;
}

/** The first maxBytes UTF-8 bytes of s, cut at a character boundary. */
export function clipStart(s: string, maxBytes: number): string {
  if (s.length * 3 <= maxBytes || Buffer.byteLength(s, "utf8") <= maxBytes) return s;
  const b = Buffer.from(s, "utf8");
  if (b.length <= maxBytes) return s;
  let n = maxBytes;
  while (n > 0 && (b[n]! & 0xc0) === 0x80) n--;
  return b.subarray(0, n).toString("utf8");
}

/** The last maxBytes UTF-8 bytes of s, starting at a character boundary. */
export function clipTail(s: string, maxBytes: number): string {
  if (s.length * 3 <= maxBytes || Buffer.byteLength(s, "utf8") <= maxBytes) return s;
  const b = Buffer.from(s, "utf8");
  if (b.length <= maxBytes) return s;
  let i = b.length - maxBytes;
  while (i < b.length && (b[i]! & 0xc0) === 0x80) i++;
  return b.subarray(i).toString("utf8");
}
