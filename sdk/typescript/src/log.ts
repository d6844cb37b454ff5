/** Where an Executor logs. Each method takes a message and optional fields. */
export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

const levels = { debug: 0, info: 1, warn: 2, error: 3 } as const;

/** A Logger writing one line per entry to stderr, from level on (default "info"). */
export function consoleLogger(level: keyof typeof levels = "info"): Logger {
  const min = levels[level];
  const write = (lvl: keyof typeof levels) => (msg: string, fields?: Record<string, unknown>) => {
    if (levels[lvl] < min) return;
    const extra = fields === undefined ? "" : " " + Object.entries(fields).map(([k, v]) => `${k}=${typeof v === "string" ? JSON.stringify(v) : String(v)}`).join(" ");
    process.stderr.write(`${new Date().toISOString()} ${lvl.toUpperCase()} ${msg}${extra}\n`);
  };
  return { debug: write("debug"), info: write("info"), warn: write("warn"), error: write("error") };
}

/** A Logger that drops everything. */
export const silentLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };
