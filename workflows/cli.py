"""``flowdesk workflows validate|show``."""

from __future__ import annotations

import typer

from .importers.cli import import_app  # noqa: F401  (re-exported for graph.cli)

workflows_app = typer.Typer(help="Validate and show workflow libraries.", no_args_is_help=True)
