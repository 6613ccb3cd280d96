"""HumanHandoff: the user asks for a person.  The agent hands over; the workflows on the stack stay
as they are, so a colleague (or the user, later) can pick them up."""

from __future__ import annotations

from typing import Literal

from .base import Command


class HumanHandoff(Command):
    command: Literal["human_handoff"] = "human_handoff"
