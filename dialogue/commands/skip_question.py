"""SkipQuestion: the user cannot answer the pending question ("I don't know", "no idea").  The
reply is not taken as the slot's value; branch conditions on missing information can read it."""

from __future__ import annotations

from typing import Literal

from .base import Command


class SkipQuestion(Command):
    command: Literal["skip_question"] = "skip_question"
    asked: list[str] = []
