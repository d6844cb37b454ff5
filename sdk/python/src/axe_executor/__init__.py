"""axe_executor: run handlers for the axe scheduler (executor protocol version 2).

    from axe_executor import Config, Executor

    ex = Executor(Config(app="billing", schedulers=["http://127.0.0.1:7070"], token="..."))

    @ex.handler("invoice")
    def invoice(ctx):
        return {"customer": ctx.params["customer"], "sent": True}

    ex.run_forever()

See README.md and docs/protocol.md of the axe repository.
"""

from .errors import (DEADLINE_EXCEEDED, KILLED, SHUTDOWN, AlreadyStarted, Cancelled,
                     ExecutorError, InvalidConfig, InvalidMessage, NoScheduler,
                     RegistrationRejected, Stopped, Unauthorized)
from .executor import Config, Executor, RunContext, pool_size_default
from .store import MemoryTicketStore, Outcome, SqliteTicketStore, TicketStore

__version__ = "0.1.0"

__all__ = [
    "Config", "Executor", "RunContext", "pool_size_default",
    "TicketStore", "MemoryTicketStore", "SqliteTicketStore", "Outcome",
    "Cancelled", "ExecutorError", "InvalidConfig", "InvalidMessage", "NoScheduler",
    "RegistrationRejected", "Stopped", "Unauthorized", "AlreadyStarted",
    "KILLED", "DEADLINE_EXCEEDED", "SHUTDOWN",
]
