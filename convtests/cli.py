"""``flowdesk test PATH... [--library DIR] [--junit FILE] [--coverage]``: run conversation tests.

Exit status: 0 when every case passes, 1 when any fails (a diff per failed step is printed), 2 when a
test file is malformed (every problem with file:line and field) or the library cannot be loaded.
"""

from __future__ import annotations

from typing import Optional

import typer
from rich.console import Console
from rich.table import Table


def test_command(
    paths: list[str] = typer.Argument(..., help="Test files or directories (every *.yaml under them)."),
    library: Optional[str] = typer.Option(None, "--library", help="Workflow library directory (default: bundled)."),
    junit: Optional[str] = typer.Option(None, "--junit", help="Write JUnit XML to this file."),
    coverage: bool = typer.Option(False, "--coverage", help="Report per workflow the procedure steps, branches "
                                                             "and APIs the tests exercised."),
    only: Optional[str] = typer.Option(None, "--only", help="Run only the cases whose name matches this regex."),
) -> None:
    """Run conversation tests against the agent (offline policies unless models are configured)."""
    import re

    from graph.context import Context
    from graph.errors import describe, named_errors
    from graph.resources import get_resources
    from workflows.errors import LibraryError

    from .coverage import measure, summary_rows
    from .format import load_tests
    from .junit import failure_text, write_junit
    from .runner import run_cases

    console = Console()
    try:
        context = Context(library=library) if library else Context()
        lib = get_resources(context).library
        cases = load_tests(paths, workflows=lib.workflows)
    except LibraryError as exc:
        console.print(f"flowdesk test: malformed test files or library:\n{exc}", style="red", markup=False,
                      highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except named_errors() as exc:
        console.print(f"flowdesk test: {describe(exc)}", style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if only:
        cases = [c for c in cases if re.search(only, c.name)]

    marks = {"pass": "[green]PASS[/]", "fail": "[bold red]FAIL[/]", "error": "[bold red]ERROR[/]",
             "xfail": "[yellow]XFAIL[/]", "XPASS": "[bold red]XPASS[/]"}

    def progress(r) -> None:
        console.print(f"{marks[r.outcome]} {r.case.name} [dim]({r.case.file}:{r.case.line}, {r.seconds:.1f} s)[/]")
        if r.outcome == "XPASS":
            console.print(f"  marked as a known failure ({r.case.known_failure}) but it passed: remove the mark",
                          style="red", markup=False)
        elif not r.held:
            known = f"known failure: {r.case.known_failure}\n" if r.case.known_failure else ""
            console.print(known + failure_text(r), markup=False, highlight=False,
                          style="yellow" if r.case.known_failure else "red")

    results = run_cases(cases, context, progress=progress)
    failed = [r for r in results if not r.passed]
    if junit:
        write_junit(results, junit)
    if coverage:
        cov = measure(lib, [r.exercised for r in results])
        t = Table(title="coverage of the library's procedures", show_lines=False)
        for h in ("workflow", "steps", "branches", "APIs", "not exercised"):
            t.add_column(h, overflow="fold")
        for row in summary_rows(cov):
            t.add_row(*row)
        console.print(t)
        steps = sum(len(c.steps) for c in cov)
        branches = sum(len(c.branches) for c in cov)
        apis = sum(len(c.apis) for c in cov)
        console.print(f"steps {sum(len(c.steps_hit) for c in cov)}/{steps}, branches "
                      f"{sum(len(c.branches_hit) for c in cov)}/{branches}, APIs {sum(len(c.apis_hit) for c in cov)}"
                      f"/{apis}")
    style = "bold red" if failed else "bold green"
    xfail = sum(1 for r in results if r.outcome == "xfail")
    console.print(f"{len(results) - len(failed) - xfail} passed, {len(failed)} failed"
                  + (f", {xfail} known failures" if xfail else ""), style=style)
    raise typer.Exit(1 if failed else 0)
