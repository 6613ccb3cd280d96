"""AskCapabilities: the user asks what the agent can do ("what can you help me with?").  The agent
answers with what its library covers (``pattern_capabilities``) instead of searching the question as a
task, and goes on with the active workflow's question if one is waiting."""

from __future__ import annotations

from typing import Literal

from .base import Command


class AskCapabilities(Command):
    command: Literal["capabilities"] = "capabilities"
