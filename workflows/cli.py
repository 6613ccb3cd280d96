"""``flowdesk workflows validate|show`` and ``flowdesk import flowbench|star|sgd``."""

from __future__ import annotations

import typer

workflows_app = typer.Typer(help="Validate and show workflow libraries.", no_args_is_help=True)
import_app = typer.Typer(help="Import a dataset's workflows into a PDL library tree.", no_args_is_help=True)
