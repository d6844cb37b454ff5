// @axe-sched/executor: serve runs of the axe scheduler from async handlers (docs/protocol.md).

export {
  Executor,
  type ExecutorOptions,
  type Handler,
  type RunContext,
  LISTEN_DEFAULT,
  HEARTBEAT_INTERVAL_MS_DEFAULT,
  QUEUE_SIZE_DEFAULT,
  DEDUP_TTL_MS_DEFAULT,
  RESEND_MIN_MS_DEFAULT,
  RESEND_MAX_MS_DEFAULT,
  REQUEST_TIMEOUT_MS_DEFAULT,
  RESULT_SENDERS_DEFAULT,
  OUTPUT_LIMIT_DEFAULT,
  STOP_TIMEOUT_MS_DEFAULT,
  POOL_SIZE_PER_CPU_DEFAULT,
} from "./executor.js";
export { type DedupStore, type FinishedRun, MemoryDedupStore, DEDUP_SIZE_DEFAULT } from "./dedup.js";
export {
  ConfigError,
  DeadlineError,
  KilledError,
  NoSchedulerError,
  RegistrationRejectedError,
  ShutdownError,
  UnauthorizedError,
} from "./errors.js";
export { type Logger, consoleLogger, silentLogger } from "./log.js";
export { FieldError } from "./json.js";
export { dispatchKey, signCall, verifyCall, type SignedCall, SIGNATURE_SCHEME, BAD_SIGNATURE } from "./sign.js";
export { PROTOCOL_VERSION } from "./protocol.js";
