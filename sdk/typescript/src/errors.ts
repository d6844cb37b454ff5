// The errors of the SDK, one class each so callers can tell them apart with instanceof.

/** An option of ExecutorOptions is invalid; the message names it. */
export class ConfigError extends Error {
  override name = "ConfigError";
}

/** A scheduler refused the executor's token at registration (401 or 403). Final. */
export class UnauthorizedError extends Error {
  override name = "UnauthorizedError";
}

/** A scheduler refused the registration as malformed (400). Final. */
export class RegistrationRejectedError extends Error {
  override name = "RegistrationRejectedError";
}

/** No configured scheduler answered (each refused the connection or answered 503). */
export class NoSchedulerError extends Error {
  override name = "NoSchedulerError";
}

/** The reason of a run's AbortSignal when /axe/kill killed it. */
export class KilledError extends Error {
  override name = "KilledError";
  constructor() {
    super("executor: run killed");
  }
}

/** The reason of a run's AbortSignal when its deadline passed. */
export class DeadlineError extends Error {
  override name = "DeadlineError";
  constructor() {
    super("context deadline exceeded: the run's deadline passed");
  }
}

/** The reason of a run's AbortSignal when stop() gave up waiting for it. */
export class ShutdownError extends Error {
  override name = "ShutdownError";
  constructor() {
    super("executor: shutting down");
  }
}
