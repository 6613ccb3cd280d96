"""Which errors are meant for the user, and how they are shown: one line (or one issue per line),
named and redacted — for the CLI's entry point (``graph.cli.main``) and ``flowdesk chat``'s loop."""

from __future__ import annotations


def named_errors() -> tuple[type[BaseException], ...]:
    """Exceptions whose message names what is wrong (a file:line, a field, a setting, a port)."""
    from memory.events import EventLogError
    from memory.ledger import LedgerError
    from memory.store import StoreLockedError, StoreUnavailableError
    from workflows.errors import LibraryError

    from .agent import AgentInputError
    from .checkpoint import CheckpointConfigError, CheckpointUnavailableError
    from .context import ContextError
    from .models import LLMProviderError, ModelConfigError
    from .serve import ServeError

    return (LibraryError, ContextError, AgentInputError, CheckpointConfigError, ModelConfigError, LLMProviderError,
            ServeError, LedgerError, StoreLockedError, StoreUnavailableError, CheckpointUnavailableError,
            EventLogError)


def describe(exc: BaseException) -> str:
    """The user-facing text of an error; a broken library lists every issue, one per line."""
    from workflows.errors import LibraryError
    from workflows.sanitize import redact

    if isinstance(exc, LibraryError):
        n = len(exc.issues)
        return redact(f"the workflow library has {n} problem{'s' if n != 1 else ''}:\n{exc}")
    return redact(str(exc))
