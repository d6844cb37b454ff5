// Signed calls, scheduler → executor (docs/protocol.md, "Authentication"; version 2 binds each
// call to one incarnation of the executor). The scheduler signs every /axe/run, /axe/runs and
// /axe/kill call with a key derived from the executor's own token; the executor recomputes the
// signature and compares in constant time. Nothing the executor receives is a credential.

import { createHmac, timingSafeEqual } from "node:crypto";

/** The scheme word that starts the Authorization header of a signed call. */
export const SIGNATURE_SCHEME = "AXE-HMAC-SHA256";

/** How far (ms) the time of a signed call may be from the executor's clock, either way. */
export const SIGNATURE_SKEW_MS = 5 * 60 * 1000;

/** The error text of every refused signature. */
export const BAD_SIGNATURE = "missing or invalid scheduler signature";

const KEY_LABEL = "axe dispatch key v1";
const MESSAGE_V2 = "axe-dispatch-v2\n";

/**
 * The dispatch key of a token: HMAC-SHA256 keyed by the token's UTF-8 bytes over the label
 * "axe dispatch key v1". The raw 32-byte digest is the key.
 */
export function dispatchKey(token: string): Buffer {
  return createHmac("sha256", Buffer.from(token, "utf8")).update(KEY_LABEL, "utf8").digest();
}

/** What a call is signed over, besides its time. */
export interface SignedCall {
  /** The executor's registered host:port. */
  address: string;
  /** The request path, e.g. "/axe/run". */
  path: string;
  /** The X-Axe-Epoch header, "" without one. */
  epoch: string;
  /** The executor's incarnation (the X-Axe-Incarnation header). */
  incarnation: string;
  /** The raw request body. */
  body: Uint8Array;
}

/** The version 2 signature (raw digest) of a call made at t (Unix ms). */
export function signature(key: Uint8Array, t: number, call: SignedCall): Buffer {
  return createHmac("sha256", key)
    .update(`${MESSAGE_V2}${t}\n${call.address}\n${call.path}\n${call.epoch}\n${call.incarnation}\n`, "utf8")
    .update(call.body)
    .digest();
}

/** The Authorization header of a call made at t (Unix ms): what a scheduler sends. */
export function signCall(key: Uint8Array, t: number, call: SignedCall): string {
  return `${SIGNATURE_SCHEME} t=${t},sig=${signature(key, t, call).toString("hex")}`;
}

const HEADER = /^AXE-HMAC-SHA256 t=(0|[1-9][0-9]{0,18}),sig=([0-9a-f]{64})$/;

/**
 * Splits an Authorization header of the signed scheme. Only the one form a scheduler writes
 * is taken (a canonical time, lower-case hex), so that one call has exactly one valid header.
 */
export function parseSignature(header: string | undefined): { t: number; sig: Buffer } | undefined {
  if (header === undefined) return undefined;
  const m = HEADER.exec(header);
  if (m === null) return undefined;
  const t = Number(m[1]);
  if (!Number.isSafeInteger(t)) return undefined;
  return { t, sig: Buffer.from(m[2]!, "hex") };
}

function fresh(t: number, now: number): boolean {
  return Math.abs(now - t) <= SIGNATURE_SKEW_MS;
}

/**
 * Whether a header is a well-formed signature of a time near now: what can be judged before
 * the body is read (a request that is not plausible may carry at most 4 KiB).
 */
export function plausibleCall(header: string | undefined, now: number): boolean {
  const p = parseSignature(header);
  return p !== undefined && fresh(p.t, now);
}

/**
 * Checks the Authorization header of a call under key at now (Unix ms). It returns undefined
 * when the call verifies, else the error text to answer 401 with.
 */
export function verifyCall(key: Uint8Array, header: string | undefined, call: SignedCall, now: number): string | undefined {
  const p = parseSignature(header);
  if (p === undefined) return BAD_SIGNATURE;
  if (!fresh(p.t, now)) {
    return `${BAD_SIGNATURE}: the call was signed more than 5 minutes away from this executor's clock: check both clocks`;
  }
  if (!timingSafeEqual(p.sig, signature(key, p.t, call))) return BAD_SIGNATURE;
  return undefined;
}
