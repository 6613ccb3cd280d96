"""Close: the user ends the conversation ("no, that's all, bye").  The active workflow's own closing
answer is given when it has one; nothing is left waiting."""

from __future__ import annotations

from typing import Literal

from ..frames import Frame
from .base import ApplyEnv, Command


class Close(Command):
    command: Literal["close"] = "close"

    def apply(self, stack: list[Frame], env: ApplyEnv) -> list[Frame]:
        return stack  # the closing answer (respond) completes the frame; interrupted ones stay resumable
