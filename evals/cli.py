"""``flowdesk eval ...``: evaluation runners (switch, next-action, compliance, extraction); ``flowdesk train
...``: fitting the learned parts from dataset logs (executor)."""

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

train_app = typer.Typer(help="Fit learned parts from dataset logs; each writes a model file to --out.",
                        no_args_is_help=True)


@train_app.callback()
def _train() -> None:
    """Fit learned parts from dataset logs (a group even with one command: ``flowdesk train executor``)."""


from .train_executor import train_command  # noqa: E402
train_app.command("executor")(train_command)
