"""``flowdesk eval ...``: evaluation runners (switch, next-action, compliance)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Run evaluations; each writes report.md, metrics.json and plots to --out.",
                  no_args_is_help=True)

from .compliance import compliance_command  # noqa: E402
app.command("compliance")(compliance_command)
from .switch import switch_command  # noqa: E402
app.command("switch")(switch_command)
from .next_action import next_action_command  # noqa: E402
app.command("next-action")(next_action_command)
from .extraction import extraction_command  # noqa: E402
app.command("extraction")(extraction_command)
from .sessions import sessions_command  # noqa: E402
app.command("sessions")(sessions_command)
