"""Close: the user ends the conversation or the active task ("no, that's all, bye", "maybe another time" to
the next step offered).  The executor answers with the active workflow's own closing answer when it has one,
else with the desk's (``pattern_close``: a goodbye to a farewell, "anything else?" otherwise), and the reply
completes the frame: nothing is left waiting, the pending question is not asked again."""

from __future__ import annotations

from typing import Literal

from ..frames import Frame
from .base import ApplyEnv, Command


class Close(Command):
    command: Literal["close"] = "close"

    def apply(self, stack: list[Frame], env: ApplyEnv) -> list[Frame]:
        return stack  # the closing answer (respond) completes the frame; interrupted ones stay resumable
