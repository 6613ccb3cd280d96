"""``flowdesk eval ...``: evaluation runners (switch, next-action, compliance)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Run evaluations; each writes report.md, metrics.json and plots to --out.",
                  no_args_is_help=True)
