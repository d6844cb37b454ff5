"""Errors the SDK raises or reports (the Go SDK's sentinel errors, spelt the same way so that
a run's error text reads alike whichever SDK ran it)."""


class ExecutorError(Exception):
    """Base of every error the SDK raises."""


class InvalidConfig(ExecutorError, ValueError):
    """The Config is unusable (the message names the field)."""


class Unauthorized(ExecutorError):
    """The scheduler refused the token at registration (401/403): a configuration mistake."""


class RegistrationRejected(ExecutorError):
    """The scheduler refused the registration (400): retrying cannot fix it."""


class NoScheduler(ExecutorError):
    """No configured scheduler address answered."""


class AlreadyStarted(ExecutorError):
    """start() was called twice."""


class Stopped(ExecutorError):
    """The executor was stopped; it cannot be started again."""


class InvalidMessage(ExecutorError, ValueError):
    """A protocol message is malformed; the text names the field (answered 400)."""


class Cancelled(Exception):
    """Raised by RunContext.check() and RunContext.sleep(raise_on_cancel=True) once the run is
    cancelled; its text is the cause (KILLED, DEADLINE_EXCEEDED or SHUTDOWN). Handlers may
    let it propagate: the run is then reported failed with that cause."""


# Causes of a cancelled run, as the Go SDK words them (context.DeadlineExceeded,
# executor.ErrKilled, executor.ErrShutdown).
KILLED = "executor: run killed"
DEADLINE_EXCEEDED = "context deadline exceeded"
SHUTDOWN = "executor: executor shut down"
