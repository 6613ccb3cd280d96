"""Workflows from conversations as a LangGraph graph (``extract`` in langgraph.json) and ``flowdesk extract``
(the offline miner by default; QA-CoT and its baselines with ``--method``/``--model``).

Wiring only: ``load`` reads the conversations (a dataset or a transcripts file), ``extract`` runs the
pipeline of ``workflows.extraction.extract`` (Proc-Sim with the project's embedder when asked, the
offline miner), ``validate`` loads the written library with the agent's own loader. The CLI runs the
same pipeline with a rich progress bar (one tick per task).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional, TypedDict

import typer

from workflows.extraction.mining import MiningConfig


class ExtractState(TypedDict, total=False):
    dataset: str  # star | abcd (or empty with ``transcripts``)
    data: str  # the data directory
    split: str
    transcripts: str  # a transcripts JSONL file (docs/TRANSCRIPTS.md)
    out: str  # the library directory to write
    select: int  # mine only the k most representative conversations per task (0 = all)
    embedder: str  # Proc-Sim embedding: "" = the offline bag of procedural elements; "minilm" | "openai:<model>"
    method: str  # "offline" (the miner) | qa-cot | basic | plan | reflection | ensemble (need ``model``)
    model: str  # provider:model for the LLM methods (graph.models.chat_model)
    conversations: int
    tasks: list[str]
    library: str
    issues: list[str]
    seconds: float


def _embed(spec: str):
    if not spec:
        return None
    from memory.embeddings import get_embedder

    return get_embedder(spec).embed


def _polarity():
    # answer branches become yes/no branches read by the executor's own yes/no detector
    from workflows.text import yes_no

    return yes_no


def _llm(method: str, model: str):
    """(method, chat callable) for the LLM methods; None for the offline miner."""
    if not method or method == "offline":
        return None
    import os

    from graph.models import chat_model

    llm = chat_model(model or "offline", os.environ.get("FLOWDESK_BASE_URL", ""), field="model")
    if llm is None:
        raise ValueError(f"method {method!r} needs a chat model (model: provider:model)")
    return method, lambda messages: str(llm.invoke(list(messages)).content)


def _source(state: ExtractState):
    from workflows.extraction.sources import load_source

    return load_source(state.get("dataset") or None, state.get("data") or None, state.get("split") or "train",
                       state.get("transcripts") or None)


def load(state: ExtractState) -> dict:
    return {"conversations": len(_source(state).transcripts)}


def extract(state: ExtractState) -> dict:
    from workflows.extraction.extract import extract_library

    src = _source(state)
    res = extract_library(src.transcripts, state["out"], MiningConfig(), embed=_embed(state.get("embedder", "")),
                          select=state.get("select", 0), domain_of=src.domain_of, binding_for=src.binding_for,
                          outputs_for=src.outputs_for,
                          domain_text=src.domain_text, polarity=_polarity(),
                          llm=_llm(state.get("method", ""), state.get("model", "")))
    return {"tasks": sorted(res.workflows), "library": str(res.root), "seconds": round(res.seconds, 2)}


def validate(state: ExtractState) -> dict:
    from workflows.library import check_library

    _, issues = check_library(state["library"])
    return {"issues": [str(i) for i in issues]}


def build_extract_graph():
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(ExtractState)
    g.add_node("load", load)
    g.add_node("extract", extract)
    g.add_node("validate", validate)
    g.add_edge(START, "load")
    g.add_edge("load", "extract")
    g.add_edge("extract", "validate")
    g.add_edge("validate", END)
    return g.compile()


def extract_command(
    dataset: Optional[str] = typer.Option(None, "--dataset", help="star | abcd (with --data)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Data directory (default: $FLOWDESK_DATA or ../shared/data)."),
    split: str = typer.Option("train", "--split", help="STAR split: train (DialogueID % 5 in 1,2) | dev | all."),
    transcripts: Optional[Path] = typer.Option(None, "--transcripts", help="Transcripts JSONL (docs/TRANSCRIPTS.md)."),
    out: Path = typer.Option(..., "--out", help="Library directory to write."),
    select: int = typer.Option(0, "--select", help="Mine only the k most representative conversations per task (Proc-Sim; 0 = all)."),
    embedder: str = typer.Option("", "--embedder", help="Dense embedder for Proc-Sim (minilm | openai:<model>); empty = the offline bag of procedural elements."),
    method: str = typer.Option("offline", "--method", help="offline (process mining) | qa-cot | basic | plan | reflection | ensemble."),
    model: str = typer.Option("", "--model", help="Chat model for the LLM methods (provider:model; FLOWDESK_BASE_URL for other endpoints)."),
    every: int = typer.Option(1, "--every", help="Keep every k-th dialogue of the split (sampling while developing)."),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty output directory."),
) -> None:
    """Extract PDL workflows from conversations: one workflow per task, written as a library tree."""
    import shutil

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from workflows.errors import LibraryError
    from workflows.extraction.extract import extract_library, group_by_task
    from workflows.extraction.sources import DATASETS, load_source
    from workflows.importers.common import default_data_dir
    from workflows.library import check_library

    console = Console()
    if bool(dataset) == bool(transcripts):
        raise typer.BadParameter("give --dataset (with --data) or --transcripts", param_hint="--dataset")
    if dataset and dataset not in DATASETS:
        raise typer.BadParameter(f"one of {', '.join(DATASETS)}", param_hint="--dataset")
    from graph.models import ModelConfigError
    from workflows.extraction.qa_cot import METHODS

    if method not in ("offline",) + METHODS:
        raise typer.BadParameter(f"one of offline, {', '.join(METHODS)}", param_hint="--method")
    try:
        llm = _llm(method, model)
    except (ModelConfigError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--model") from None
    if out.exists() and any(out.iterdir()):
        if not force:
            console.print(f"[red]{out} is not empty[/red]; pass --force to replace it.")
            raise typer.Exit(2)
        shutil.rmtree(out)
    t0 = time.perf_counter()
    try:
        src = load_source(dataset, data or default_data_dir(), split, transcripts, every=every)
    except LibraryError as exc:  # transcripts: every problem with file:line
        console.print(f"[red]{len(exc.issues)} problem(s) in the transcripts:[/red]")
        for issue in exc.issues[:30]:
            console.print(f"  {issue}")
        raise typer.Exit(1) from None
    except (FileNotFoundError, ValueError) as exc:
        console.print(f"[red]cannot read the conversations:[/red] {exc}")
        raise typer.Exit(1) from None
    tasks = group_by_task(src.transcripts)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[current]}"), console=console) as bar:
        tick = bar.add_task(f"extracting {src.label}", total=len(tasks), current="")
        res = extract_library(src.transcripts, out, MiningConfig(), embed=_embed(embedder), select=select,
                              domain_of=src.domain_of, binding_for=src.binding_for, outputs_for=src.outputs_for,
                              domain_text=src.domain_text,
                              polarity=_polarity(), llm=llm, progress=lambda task: bar.update(tick, advance=1, current=task))
    lib, issues = check_library(out)
    skipped = sorted(set(tasks) - set(res.workflows))
    console.print(f"{out}: {len(res.workflows)} workflows from {len(src.transcripts)} conversations "
                  f"({lib.stats()['domains']} domains, {lib.stats()['roles']} roles) in "
                  f"{time.perf_counter() - t0:.1f} s; {len(issues)} validation issue(s)")
    for task in skipped:
        console.print(f"[yellow]skipped {task}:[/yellow] {res.representatives[task][0]}")
    for issue in issues[:30]:
        console.print(f"[red]{issue}[/red]")
    if issues:
        raise typer.Exit(1)


graph = build_extract_graph()
