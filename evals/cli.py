"""``flowdesk eval ...``: evaluation runners (switch, next-action, compliance, extraction, sessions);
``flowdesk train ...``: fitting the agent's learned parts on training splits (switch ranker, executor)."""

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
from .experience import experience_command  # noqa: E402
app.command("experience")(experience_command)
from .enums_eval import eval_command as enums_command  # noqa: E402
app.command("enums")(enums_command)

# ``flowdesk train ...``: fitting what the agent loads (on training splits only); each writes a model file.
train_app = typer.Typer(help="Fit the agent's learned parts on training splits; each writes a model file.",
                        no_args_is_help=True)

from .switch_train import train_command as train_switch  # noqa: E402
train_app.command("switch")(train_switch)
from .train_executor import train_command as train_executor  # noqa: E402
train_app.command("executor")(train_executor)
from .scope_train import train_command as train_scope  # noqa: E402
train_app.command("scope")(train_scope)
from .closing_train import train_command as train_closing  # noqa: E402
train_app.command("closing")(train_closing)
from .spans_train import train_command as train_spans  # noqa: E402
train_app.command("spans")(train_spans)
