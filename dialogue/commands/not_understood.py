"""NotUnderstood: the turn is not language — empty once normalised, noise, a key held down, pasted data
(``workflows.text.reads_as_language``).  Nothing is started or filled; the agent asks the user to say
what they need (and, inside a workflow, asks its question again)."""

from __future__ import annotations

from typing import ClassVar, Literal

from .base import Command


class NotUnderstood(Command):
    command: Literal["not_understood"] = "not_understood"
    kind: ClassVar[str] = "not_understood"
