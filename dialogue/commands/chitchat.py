"""ChitChat and OutOfScope: turns with no task for the agent.

ChitChat — greetings, thanks, small talk with no workflow active.  OutOfScope — a side question the
active workflow cannot answer while it waits for an answer: the agent says so and asks again; with no
workflow open, a request the library does not serve (the scope gate): the agent says what it covers."""

from __future__ import annotations

from typing import Literal

from .base import Command


class ChitChat(Command):
    command: Literal["chitchat"] = "chitchat"


class OutOfScope(Command):
    command: Literal["out_of_scope"] = "out_of_scope"
