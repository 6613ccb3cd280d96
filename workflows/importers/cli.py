"""``flowdesk import flowbench|star|sgd --data DIR --out DIR``.

Each command imports one dataset into a PDL library tree, validates it with the same loader the
agent uses, and prints the counts (domains, roles, workflows, APIs), any problems and the time.
``--data`` defaults to ``FLOWDESK_DATA`` or ``../shared/data``.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Callable

import typer

import_app = typer.Typer(help="Import a dataset's workflows into a PDL library tree.", no_args_is_help=True)

DATA_HELP = "Data directory (default: $FLOWDESK_DATA or ../shared/data)."


def _data(data: Path | None) -> Path:
    from .common import default_data_dir

    return Path(data) if data else default_data_dir()


def _run(label: str, out: Path, force: bool, run: Callable[[], object], notes: Callable[[object], list[str]] = lambda r: []) -> None:
    from rich.console import Console
    from rich.table import Table

    from ..library import check_library

    console = Console()
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not force:
            console.print(f"[red]{out} is not empty[/red]; pass --force to replace it.")
            raise typer.Exit(2)
        shutil.rmtree(out)
    start = time.perf_counter()
    try:
        result = run()
    except (FileNotFoundError, ValueError) as exc:
        console.print(f"[red]import failed:[/red] {exc}")
        raise typer.Exit(1) from None
    imported = time.perf_counter() - start
    lib, issues = check_library(out)
    total = time.perf_counter() - start
    table = Table(title=f"{label} -> {out}")
    for col in ("domains", "roles", "workflows", "APIs", "issues", "import s", "import+validate s"):
        table.add_column(col, justify="right")
    s = lib.stats()
    table.add_row(str(s["domains"]), str(s["roles"]), str(s["workflows"]), str(s["apis"]), str(len(issues)),
                  f"{imported:.2f}", f"{total:.2f}")
    console.print(table)
    for line in notes(result):
        console.print(line)
    for issue in issues[:30]:
        console.print(f"[red]{issue}[/red]")
    if issues:
        raise typer.Exit(1)


@import_app.command("flowbench")
def flowbench_command(data: Path = typer.Option(None, "--data", help=DATA_HELP),
                      out: Path = typer.Option(Path(".flowdesk/library/flowbench"), "--out", help="Output library directory."),
                      force: bool = typer.Option(False, "--force", help="Replace a non-empty output directory.")) -> None:
    """FlowBench's 51 workflows (FlowSwitch packaging): 6 domains, 22 roles, 4 representations each."""
    from .flowbench import KNOWN_UNUSED_APIS, import_flowbench_report

    def notes(report) -> list[str]:
        lines = [f"{len(report.loops)} workflows have retry loops (while COND)"]
        for wf, apis in report.unused_apis.items():
            known = set(apis) <= KNOWN_UNUSED_APIS.get(wf, set())
            lines.append(f"{'[yellow]' if known else '[red]'}{wf}: tools not in the flowchart: {', '.join(apis)}"
                         f"{' (known dataset gap)' if known else ''}[/]")
        return lines

    _run("FlowBench", out, force, lambda: import_flowbench_report(_data(data), out), notes)


@import_app.command("star")
def star_command(data: Path = typer.Option(None, "--data", help=DATA_HELP),
                 out: Path = typer.Option(Path(".flowdesk/library/star"), "--out", help="Output library directory."),
                 force: bool = typer.Option(False, "--force", help="Replace a non-empty output directory.")) -> None:
    """STAR's 24 task flowcharts, with tools executable against the knowledge-base specs."""
    from .star import import_star

    _run("STAR", out, force, lambda: import_star(_data(data), out))


@import_app.command("sgd")
def sgd_command(data: Path = typer.Option(None, "--data", help=DATA_HELP),
                out: Path = typer.Option(None, "--out", help="Output library directory (default .flowdesk/library/sgd-<split>)."),
                split: str = typer.Option("train", "--split", help="train or dev (their services differ)."),
                force: bool = typer.Option(False, "--force", help="Replace a non-empty output directory.")) -> None:
    """SGD schema: domain -> service -> intent, workflows named <service>__<intent>."""
    from .sgd import import_sgd

    out = out or Path(f".flowdesk/library/sgd-{split}")
    _run(f"SGD ({split})", out, force, lambda: import_sgd(_data(data), out, split))
