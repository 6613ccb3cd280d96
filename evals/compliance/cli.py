"""``flowdesk eval compliance``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer

from workflows.errors import LibraryError

from .runner import run_eval
from .scripts import POLICIES, SCRIPTS_DIR


def compliance_command(
    out: str = typer.Option("reports/compliance", help="Output folder (report.md, metrics.json, PNGs)."),
    scripts: str = typer.Option(str(SCRIPTS_DIR), help="Folder of script templates (*.yaml)."),
    policy: Optional[list[str]] = typer.Option(None, help=f"Policies to run (repeatable): {', '.join(POLICIES)}."),
    limit: int = typer.Option(0, help="Run at most this many scripts (spread over templates); 0 = all."),
    only: str = typer.Option("", help="Regex on script ids."),
    store_dir: str = typer.Option("", help="Retrieval store (default: FLOWDESK_STORE_DIR / .flowdesk/store)."),
    work_dir: str = typer.Option("", help="Where the session databases live (default: a temp dir)."),
) -> None:
    """Adversarial compliance sessions (FlowAgent OOW categories) under the offline and scripted-LLM
    executors, with a controllers-off ablation. Writes report.md, metrics.json, sessions.jsonl, PNGs."""
    from graph.context import Context

    for k, v in (("ANONYMIZED_TELEMETRY", "False"), ("ORT_DISABLE_TELEMETRY", "1"), ("HF_HUB_OFFLINE", "1")):
        os.environ.setdefault(k, v)
    policies = tuple(policy or POLICIES)
    bad = [p for p in policies if p not in POLICIES]
    if bad:
        raise typer.BadParameter(f"--policy: {bad} not in {list(POLICIES)}")
    ctx = Context(store_dir=store_dir) if store_dir else Context()
    try:
        metrics = run_eval(out, scripts_dir=scripts, policies=policies, limit=limit or None, only=only or None,
                           context=ctx, work_dir=work_dir or None,
                           progress=lambda r: typer.echo(f"{r['policy']:>18} {r['id']:<34} "
                                                         f"{'ok ' if r['success'] else 'FAIL'} invalid={len(r['invalid'])} "
                                                         f"rejections={r['rejections']} {r['seconds']:.1f}s", err=True))
    except LibraryError as exc:
        typer.echo(f"compliance scripts are invalid:\n{exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(metrics["summary"], indent=2))
    typer.echo(f"report: {Path(out) / 'report.md'}")
