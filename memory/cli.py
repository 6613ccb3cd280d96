"""``flowdesk index LIBRARY_DIR``: build or incrementally update the retrieval store."""

from __future__ import annotations

import typer


def index_command(library: str = typer.Argument(..., help="Workflow library directory")) -> None:
    """Build or incrementally update the Chroma + BM25 index of a library."""
    raise typer.Exit(code=2)
