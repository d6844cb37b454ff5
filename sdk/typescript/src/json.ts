// Strict JSON reading for the executor protocol (docs/protocol.md, "Tolerant reading").
//
// JSON.parse accepts a body the protocol refuses: it merges a repeated key silently (the last
// one wins, so two readers of one body can disagree on what it says), and it turns a lone
// UTF-16 surrogate escape ("\ud800") into a string that is no text. So bodies are read by
// this small scanner instead. It refuses, naming the field: a repeated key in any object, a
// lone surrogate escape, a syntax error, and anything after the one value. Invalid UTF-8 is
// refused before it runs (decodeUTF8, TextDecoder with fatal: true). It keeps what a reader
// needs that JSON.parse loses: the raw text of every value (a number's exact spelling, the
// params passed on as they came).

/** A body, or part of one, that is not the JSON the protocol takes. `field` names where. */
export class FieldError extends Error {
  readonly field: string;
  readonly problem: string;
  constructor(field: string, problem: string) {
    super(field === "" ? problem : `${field}: ${problem}`);
    this.name = "FieldError";
    this.field = field;
    this.problem = problem;
  }
}

/** One scanned JSON value with its place in the text it came from ([start, end)). */
export type JsonNode =
  | { kind: "object"; start: number; end: number; members: Map<string, JsonNode> }
  | { kind: "array"; start: number; end: number; items: JsonNode[] }
  | { kind: "string"; start: number; end: number; value: string }
  | { kind: "number"; start: number; end: number; raw: string }
  | { kind: "bool"; start: number; end: number; value: boolean }
  | { kind: "null"; start: number; end: number };

/** How deep objects and arrays may nest; deeper is refused rather than risking the stack. */
export const MAX_DEPTH = 1000;

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * Decodes UTF-8 bytes, refusing invalid ones. A byte order mark is kept (and then refused by
 * scan as a character outside any value), not silently dropped.
 */
export function decodeUTF8(bytes: Uint8Array): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw new FieldError("", "invalid UTF-8 in the body");
  }
}

/** Joins a field path as the protocol's errors write it: "runs[2].ticket", "params.a". */
export function fieldPath(parent: string, key: string | number): string {
  if (typeof key === "number") return `${parent}[${key}]`;
  return parent === "" ? key : `${parent}.${key}`;
}

/**
 * Scans text as exactly one JSON value, strictly; the error names the field at fault.
 * invalidAt, when given, is where text holds a replacement for invalid UTF-8: reaching it in
 * a string refuses that string's field.
 */
export function scan(text: string, invalidAt = -1): JsonNode {
  const s = new Scanner(text, invalidAt);
  s.skipSpace();
  if (s.pos >= text.length) throw new FieldError("", "invalid JSON: empty body");
  const v = s.value("", 0);
  s.skipSpace();
  if (s.pos < text.length) throw new FieldError("", "invalid JSON: trailing data after the value");
  return v;
}

/**
 * Reads bytes as one strict JSON value: decodeUTF8, then scan. A body with invalid UTF-8 is
 * refused naming the field whose string holds the first invalid byte.
 */
export function parseStrict(bytes: Uint8Array): { text: string; node: JsonNode } {
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    // Scan the text with the invalid bytes replaced, stopping at the first of them, to name
    // the field it is in (or the syntax error before it).
    const bad = firstInvalidUTF8(bytes);
    const at = lenient.decode(bytes.subarray(0, bad)).length;
    scan(lenient.decode(bytes), at);
    throw new FieldError("", "invalid UTF-8 in the body");
  }
  return { text, node: scan(text) };
}

const lenient = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

/** The offset of the first byte of bytes that starts no valid UTF-8 sequence (bytes.length when none). */
export function firstInvalidUTF8(bytes: Uint8Array): number {
  const cont = (i: number, lo = 0x80, hi = 0xbf) => i < bytes.length && bytes[i]! >= lo && bytes[i]! <= hi;
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i]!;
    let n: number;
    if (b < 0x80) n = 1;
    else if (b >= 0xc2 && b <= 0xdf) n = cont(i + 1) ? 2 : 0;
    else if (b >= 0xe0 && b <= 0xef) {
      const lo = b === 0xe0 ? 0xa0 : 0x80;
      const hi = b === 0xed ? 0x9f : 0xbf;
      n = cont(i + 1, lo, hi) && cont(i + 2) ? 3 : 0;
    } else if (b >= 0xf0 && b <= 0xf4) {
      const lo = b === 0xf0 ? 0x90 : 0x80;
      const hi = b === 0xf4 ? 0x8f : 0xbf;
      n = cont(i + 1, lo, hi) && cont(i + 2) && cont(i + 3) ? 4 : 0;
    } else n = 0;
    if (n === 0) return i;
    i += n;
  }
  return i;
}

/** The plain JavaScript value of a node (numbers as JavaScript numbers). */
export function toValue(node: JsonNode): unknown {
  switch (node.kind) {
    case "object": {
      const o: Record<string, unknown> = {};
      for (const [k, v] of node.members) {
        // defineProperty, not assignment: a member named "__proto__" is data, not a prototype.
        Object.defineProperty(o, k, { value: toValue(v), enumerable: true, writable: true, configurable: true });
      }
      return o;
    }
    case "array":
      return node.items.map(toValue);
    case "number":
      return Number(node.raw);
    case "null":
      return null;
    default:
      return node.value;
  }
}

/**
 * The text of node with the whitespace between tokens removed and everything else as it
 * came (escapes, number spellings): what Go's json.Compact makes of it.
 */
export function compactText(text: string, node: JsonNode): string {
  const raw = text.slice(node.start, node.end);
  if (node.kind !== "object" && node.kind !== "array") return raw;
  let out = "";
  let from = 0;
  let inString = false;
  for (let i = 0; i < raw.length; i++) {
    const c = raw.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) {
      out += raw.slice(from, i);
      from = i + 1;
    }
  }
  return out + raw.slice(from);
}

/** What kind of JSON a node is, in the words errors use ("string", "number", "object"). */
export function kindName(node: JsonNode): string {
  return node.kind === "bool" ? "bool" : node.kind;
}

class Scanner {
  pos = 0;
  constructor(
    readonly text: string,
    readonly invalidAt = -1,
  ) {}

  skipSpace(): void {
    const t = this.text;
    let p = this.pos;
    for (; p < t.length; p++) {
      const c = t.charCodeAt(p);
      if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    }
    this.pos = p;
  }

  fail(field: string, what: string): never {
    if (this.pos >= this.text.length) {
      throw new FieldError("", `invalid JSON: the body ends at character ${this.pos}, inside a value`);
    }
    throw new FieldError(field, `invalid JSON at character ${this.pos}: ${what}`);
  }

  value(field: string, depth: number): JsonNode {
    const t = this.text;
    const start = this.pos;
    const c = t.charCodeAt(start);
    switch (c) {
      case 0x7b: // {
        return this.object(field, depth + 1);
      case 0x5b: // [
        return this.array(field, depth + 1);
      case 0x22: // "
        return { kind: "string", start, value: this.string(field), end: this.pos };
      case 0x74: // t
        return this.literal(field, "true", { kind: "bool", start, end: start + 4, value: true });
      case 0x66: // f
        return this.literal(field, "false", { kind: "bool", start, end: start + 5, value: false });
      case 0x6e: // n
        return this.literal(field, "null", { kind: "null", start, end: start + 4 });
      default:
        if (c === 0x2d || (c >= 0x30 && c <= 0x39)) return this.number(field);
        return this.fail(field, "expected a value");
    }
  }

  literal(field: string, word: string, node: JsonNode): JsonNode {
    if (!this.text.startsWith(word, this.pos)) this.fail(field, "expected a value");
    this.pos += word.length;
    return node;
  }

  number(field: string): JsonNode {
    const t = this.text;
    const start = this.pos;
    let p = start;
    const digit = (i: number) => {
      const c = t.charCodeAt(i);
      return c >= 0x30 && c <= 0x39;
    };
    if (t.charCodeAt(p) === 0x2d) p++;
    if (t.charCodeAt(p) === 0x30) p++;
    else if (digit(p)) while (digit(p)) p++;
    else {
      this.pos = p;
      this.fail(field, "expected a digit");
    }
    if (t.charCodeAt(p) === 0x2e) {
      p++;
      if (!digit(p)) {
        this.pos = p;
        this.fail(field, "expected a digit after the decimal point");
      }
      while (digit(p)) p++;
    }
    const e = t.charCodeAt(p);
    if (e === 0x65 || e === 0x45) {
      p++;
      const sign = t.charCodeAt(p);
      if (sign === 0x2b || sign === 0x2d) p++;
      if (!digit(p)) {
        this.pos = p;
        this.fail(field, "expected a digit in the exponent");
      }
      while (digit(p)) p++;
    }
    this.pos = p;
    return { kind: "number", start, end: p, raw: t.slice(start, p) };
  }

  string(field: string): string {
    const t = this.text;
    let p = this.pos + 1; // after the opening quote
    let out = "";
    let from = p;
    for (;;) {
      if (p >= t.length) {
        this.pos = p;
        this.fail(field, "unterminated string");
      }
      if (p === this.invalidAt) throw new FieldError(field, "invalid UTF-8 in a string");
      const c = t.charCodeAt(p);
      if (c === 0x22) {
        out += t.slice(from, p);
        this.pos = p + 1;
        return out;
      }
      if (c < 0x20) {
        this.pos = p;
        this.fail(field, "a control character in a string must be escaped");
      }
      if (c !== 0x5c) {
        p++;
        continue;
      }
      out += t.slice(from, p);
      const e = t.charCodeAt(p + 1);
      p += 2;
      switch (e) {
        case 0x22: out += '"'; break;
        case 0x5c: out += "\\"; break;
        case 0x2f: out += "/"; break;
        case 0x62: out += "\b"; break;
        case 0x66: out += "\f"; break;
        case 0x6e: out += "\n"; break;
        case 0x72: out += "\r"; break;
        case 0x74: out += "\t"; break;
        case 0x75: { // u
          const hi = this.hex4(field, p);
          p += 4;
          if (hi >= 0xdc00 && hi <= 0xdfff) {
            throw new FieldError(field, "a lone UTF-16 surrogate (\\ud800-\\udfff) in a string is not a character");
          }
          if (hi >= 0xd800 && hi <= 0xdbff) {
            if (t.charCodeAt(p) !== 0x5c || t.charCodeAt(p + 1) !== 0x75) {
              throw new FieldError(field, "a lone UTF-16 surrogate (\\ud800-\\udfff) in a string is not a character");
            }
            const lo = this.hex4(field, p + 2);
            if (lo < 0xdc00 || lo > 0xdfff) {
              throw new FieldError(field, "a lone UTF-16 surrogate (\\ud800-\\udfff) in a string is not a character");
            }
            p += 6;
            out += String.fromCharCode(hi, lo);
          } else {
            out += String.fromCharCode(hi);
          }
          break;
        }
        default:
          this.pos = p - 1;
          this.fail(field, "invalid escape in a string");
      }
      from = p;
    }
  }

  hex4(field: string, at: number): number {
    const h = this.text.slice(at, at + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(h)) {
      this.pos = at;
      this.fail(field, "invalid \\u escape in a string");
    }
    return parseInt(h, 16);
  }

  object(field: string, depth: number): JsonNode {
    if (depth > MAX_DEPTH) throw new FieldError(field, `nested deeper than ${MAX_DEPTH} levels`);
    const start = this.pos;
    this.pos++; // {
    const members = new Map<string, JsonNode>();
    this.skipSpace();
    if (this.text.charCodeAt(this.pos) === 0x7d) {
      this.pos++;
      return { kind: "object", start, end: this.pos, members };
    }
    for (;;) {
      this.skipSpace();
      if (this.text.charCodeAt(this.pos) !== 0x22) this.fail(field, "expected a key in quotes");
      const key = this.string(field);
      const member = fieldPath(field, key);
      if (members.has(key)) throw new FieldError(member, "repeated key: each key may appear once in an object");
      this.skipSpace();
      if (this.text.charCodeAt(this.pos) !== 0x3a) this.fail(member, "expected ':' after a key");
      this.pos++;
      this.skipSpace();
      members.set(key, this.value(member, depth));
      this.skipSpace();
      const c = this.text.charCodeAt(this.pos);
      this.pos++;
      if (c === 0x2c) continue;
      if (c === 0x7d) return { kind: "object", start, end: this.pos, members };
      this.pos--;
      this.fail(field, "expected ',' or '}' in an object");
    }
  }

  array(field: string, depth: number): JsonNode {
    if (depth > MAX_DEPTH) throw new FieldError(field, `nested deeper than ${MAX_DEPTH} levels`);
    const start = this.pos;
    this.pos++; // [
    const items: JsonNode[] = [];
    this.skipSpace();
    if (this.text.charCodeAt(this.pos) === 0x5d) {
      this.pos++;
      return { kind: "array", start, end: this.pos, items };
    }
    for (;;) {
      this.skipSpace();
      items.push(this.value(fieldPath(field, items.length), depth));
      this.skipSpace();
      const c = this.text.charCodeAt(this.pos);
      this.pos++;
      if (c === 0x2c) continue;
      if (c === 0x5d) return { kind: "array", start, end: this.pos, items };
      this.pos--;
      this.fail(field, "expected ',' or ']' in an array");
    }
  }
}
