"""The commands a user turn is read as, and the one function that applies them to the dialogue stack.

One module per command (Rasa CALM's dialogue understanding): ``start_flow``, ``set_slot``,
``correct_slot``, ``cancel_flow``, ``resume_flow``, ``clarify``, ``skip_question``, ``chitchat``
(ChitChat, OutOfScope), ``not_understood``, ``human_handoff``, ``close``, ``revise_flow`` (ReviseFlow, VerifyFlow),
``capabilities`` (AskCapabilities).
In the state they are plain dicts
(``Command.model_dump()``); ``parse`` turns them back into models.
"""

from __future__ import annotations

from typing import Annotated, Any, Iterable, Union

from pydantic import Field, TypeAdapter

from ..frames import Frame
from .base import ApplyEnv, Command
from .cancel_flow import CancelFlow
from .capabilities import AskCapabilities
from .chitchat import ChitChat, OutOfScope
from .clarify import Clarify
from .close import Close
from .correct_slot import CorrectSlot
from .human_handoff import HumanHandoff
from .not_understood import NotUnderstood
from .resume_flow import ResumeFlow
from .revise_flow import ReviseFlow, VerifyFlow
from .set_slot import SetSlot
from .skip_question import SkipQuestion
from .start_flow import StartFlow

AnyCommand = Annotated[Union[StartFlow, SetSlot, CorrectSlot, CancelFlow, ResumeFlow, Clarify, SkipQuestion,
                             ChitChat, OutOfScope, NotUnderstood, HumanHandoff, Close, ReviseFlow, VerifyFlow,
                             AskCapabilities],
                       Field(discriminator="command")]
_ADAPTER: TypeAdapter = TypeAdapter(AnyCommand)

__all__ = ["AnyCommand", "ApplyEnv", "AskCapabilities", "CancelFlow", "ChitChat", "Clarify", "Close", "Command",
           "CorrectSlot", "HumanHandoff", "NotUnderstood", "OutOfScope", "ResumeFlow", "ReviseFlow", "SetSlot",
           "SkipQuestion", "StartFlow", "VerifyFlow", "apply_all", "dump", "parse"]


def parse(item: dict[str, Any] | Command) -> Command:
    return item if isinstance(item, Command) else _ADAPTER.validate_python(item)


def dump(commands: Iterable[Command]) -> list[dict[str, Any]]:
    return [c.model_dump() for c in commands]


def apply_all(stack: list[Frame], commands: Iterable[dict[str, Any] | Command], env: ApplyEnv) -> list[Frame]:
    """Apply the commands in order; each sees the stack the previous one left."""
    for item in commands:
        stack = parse(item).apply(stack, env)
    return stack


def of_kind(commands: Iterable[dict[str, Any] | Command], *kinds: str) -> list[Command]:
    return [c for c in map(parse, commands) if c.command in kinds]
