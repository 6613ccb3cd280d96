"""``flowdesk import flowbench|star|sgd --data DIR --out DIR``."""

from __future__ import annotations

import typer

import_app = typer.Typer(help="Import a dataset's workflows into a PDL library tree.", no_args_is_help=True)
