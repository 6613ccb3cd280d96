"""``flowdesk workflows validate|show``: check a library tree, print one workflow in any representation."""

from __future__ import annotations

import difflib
from pathlib import Path

import typer

from .importers.cli import import_app  # noqa: F401  (re-exported for graph.cli)
from .library import bundled_library_path, check_library
from .render import RENDER_FORMATS, render

workflows_app = typer.Typer(help="Validate and show workflow libraries.", no_args_is_help=True)


@workflows_app.command("validate")
def validate_command(
    directory: Path = typer.Argument(..., help="Library root: <domain>/<role>/<workflow>.yaml"),
) -> None:
    """Check every file of a library; list each problem as file:line: field: message."""
    lib, issues = check_library(directory)
    if issues:
        # Plain lines (not a table) so long paths never wrap and editors can jump to file:line.
        for issue in issues:
            typer.echo(str(issue))
        files = len({i.file for i in issues})
        typer.echo(f"{len(issues)} problem{'s' if len(issues) != 1 else ''} in {files} "
                   f"file{'s' if files != 1 else ''} under {directory}", err=True)
        raise typer.Exit(1)
    stats = lib.stats()
    typer.echo(f"OK {directory}: " + ", ".join(f"{n} {k}" for k, n in stats.items()))


@workflows_app.command("show")
def show_command(
    name: str = typer.Argument(..., help="Workflow name"),
    fmt: str = typer.Option("text", "--as", help=f"One of: {', '.join(RENDER_FORMATS)}"),
    library: Path = typer.Option(None, "--library", help="Library root (default: the bundled demo library)"),
) -> None:
    """Print one workflow as text, code, a Mermaid flowchart, a summary or its PDL YAML."""
    if fmt not in RENDER_FORMATS:
        typer.echo(f"error: --as must be one of {', '.join(RENDER_FORMATS)} (got {fmt!r})", err=True)
        raise typer.Exit(2)
    root = library or bundled_library_path()
    lib, issues = check_library(root)
    wf = lib.workflows.get(name)
    if wf is None:
        msg = f"error: no workflow named {name!r} in the library at {root}"
        close = difflib.get_close_matches(name, list(lib.workflows), n=3, cutoff=0.5)
        if close:
            msg += f"; did you mean {', '.join(close)}?"
        elif issues:
            msg += f" ({len(issues)} problem(s) while loading it; run `flowdesk workflows validate {root}`)"
        typer.echo(msg, err=True)
        raise typer.Exit(1)
    typer.echo(render(wf, fmt), nl=False)
