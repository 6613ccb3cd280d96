"""``flowdesk index LIBRARY_DIR``: build or incrementally update the retrieval store."""

from __future__ import annotations

import time

import typer


def index_command(
    library: str = typer.Argument(..., help="Workflow library directory"),
    store: str = typer.Option(None, "--store", help="Store directory (default: Context().store_dir)"),
    embedding: str = typer.Option(None, "--embedding", help="minilm | openai:<model> (default: Context().embedding)"),
    wait: float = typer.Option(0.0, "--wait", help="Seconds to wait when another process holds the store"),
) -> None:
    """Build or incrementally update the Chroma + BM25 index of a library."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from graph.context import Context
    from workflows.errors import LibraryError
    from workflows.library import load_library

    from memory.retrieval import library_namespace
    from memory.store import StoreLockedError, WorkflowStore

    console = Console()
    t0 = time.perf_counter()
    try:
        lib = load_library(library)
    except LibraryError as exc:
        console.print(f"[red]library {library} has problems:[/red]\n{exc}", soft_wrap=True)
        raise typer.Exit(code=2)
    ctx = Context(library=library, **({"store_dir": store} if store else {}),
                  **({"embedding": embedding} if embedding else {}))
    try:
        st = WorkflowStore(ctx.store_dir, ctx.embedding, base_url=ctx.base_url,
                           namespace=library_namespace(lib), lock_timeout=wait, chroma_url=ctx.chroma_url)
    except StoreLockedError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(code=3)
    with st, Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as bar:
        tasks: dict[str, int] = {}

        def progress(name: str, done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(f"embedding {name}", total=max(total, 1))
            bar.update(tasks[name], completed=done if total else 1)

        report = st.sync(lib, progress=progress)
    console.print(f"store {ctx.store_dir}: {len(lib.workflows)} workflows, embedding {ctx.embedding}")
    for name, s in report.per_collection.items():
        console.print(f"  {name:<10} added {s['added']:>6}  updated {s['updated']:>6}  "
                      f"unchanged {s['unchanged']:>6}  removed {s['removed']:>6}")
    console.print(f"docs added {report.added}, updated {report.updated}, unchanged {report.unchanged}, "
                  f"removed {report.removed} in {time.perf_counter() - t0:.1f} s")
