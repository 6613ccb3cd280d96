"""Clarify: the top candidates are too close to call; the agent asks the user to choose (the
``clarify`` node's interrupt).  The choice comes back as a StartFlow."""

from __future__ import annotations

from typing import Literal

from .base import Command


class Clarify(Command):
    command: Literal["clarify"] = "clarify"
    options: list[str]
