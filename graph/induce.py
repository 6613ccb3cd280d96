"""The ``induce`` graph (WISE-Flow induction, exported in ``langgraph.json``) and its CLI commands.

Graph: ``START → induce → store → END``.  Input ``{"logs": FILE_OR_DB}`` — a JSONL export of
``flowdesk logs export``, an ``events.sqlite`` or a ``postgres://`` URL; empty = the agent's own log
beside the checkpoints.  ``induce`` reads the events and runs ``memory.induce`` (the LLM variant when
``inducer_model`` is configured, else the offline process mining); ``store`` upserts the verified
blocks into the experience store of ``Context.library`` / ``store_dir`` (``memory.experience_store``).
Output: ``stats`` (partition, candidates, kept) and ``stored`` (added/updated/unchanged).

Commands: ``flowdesk induce --logs FILE_OR_DB [--library DIR]``, ``flowdesk logs export``,
``flowdesk experience list|show|prune``.
"""

import json
from pathlib import Path
from typing import Any, Optional, TypedDict

import typer
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from memory.induce import MIN_CONFIDENCE, MIN_SUPPORT

from graph.context import ENV_CLIENT_SETTINGS, ClientContext, Context, ContextError, client_settings_allowed


class InduceState(TypedDict, total=False):
    logs: str  # JSONL export, events.sqlite or postgres:// URL ("" = the agent's log beside the checkpoints)
    min_support: int
    min_confidence: float
    blocks: list[dict[str, Any]]  # the verified blocks (Block JSON)
    stats: dict[str, Any]
    stored: dict[str, int]


def default_log() -> str:
    from memory.events import events_location
    from memory.ledger import ledger_location

    return events_location(ledger_location(None))


def client_logs(state: InduceState) -> None:
    """A served client reads the agent's own log only: ``logs`` names a file or database on the server, a
    server-side setting like ``library`` or ``db_path`` (``FLOWDESK_CLIENT_SETTINGS=logs`` allows it)."""
    if state.get("logs") and "logs" not in client_settings_allowed():
        raise ContextError(f"logs: a server-side location; a client of the served induce graph reads the agent's "
                           f"own event log (leave logs empty) unless the operator allows it with "
                           f"{ENV_CLIENT_SETTINGS}=logs")


def induce_node(state: InduceState, runtime: Runtime[Context]) -> dict[str, Any]:
    from memory.events import iter_events
    from memory.induce import KINDS, induce, induce_llm

    from graph.resources import get_resources, model_for

    ctx = runtime.context or Context()
    source = state.get("logs") or default_log()
    key = get_resources(ctx).library_key
    kw = {"min_support": int(state.get("min_support") or MIN_SUPPORT),
          "min_confidence": float(state.get("min_confidence") or MIN_CONFIDENCE)}
    model = model_for(ctx, "inducer")
    events = iter_events(source, KINDS)  # a stream: a log of any size in bounded memory
    blocks, stats = induce_llm(list(events), key, model, **kw) if model is not None else induce(events, key, **kw)
    return {"blocks": [b.model_dump() for b in blocks], "stats": stats}


def store_node(state: InduceState, runtime: Runtime[Context]) -> dict[str, Any]:
    from memory.experience_store import Block

    from graph.resources import get_resources

    store = get_resources(runtime.context or Context()).experience
    if store is None:
        raise RuntimeError("store_dir: no Chroma store to keep experience in (the workflow search runs degraded)")
    return {"stored": store.upsert(Block.model_validate(b) for b in state.get("blocks") or [])}


def served_induce_node(state: InduceState, runtime: Runtime[Context]) -> dict[str, Any]:
    client_logs(state)
    return induce_node(state, runtime)


def build_induce(context_schema=Context):
    g = StateGraph(InduceState, context_schema=context_schema)
    if issubclass(context_schema, ClientContext):  # the served graph: clients follow the client rules
        g.add_node("induce", served_induce_node)
    else:
        g.add_node("induce", induce_node)
    g.add_node("store", store_node)
    g.add_edge(START, "induce")
    g.add_edge("induce", "store")
    g.add_edge("store", END)
    return g.compile(name="induce")


# the exported graph (langgraph.json; the server imports this file by path): a client's context follows the
# client rules of graph.context (server-side settings such as library and store_dir refused unless allowed)
graph = build_induce(ClientContext)


# --- CLI ----------------------------------------------------------------------------------------------

def _context(library: str | None, store_dir: str | None) -> Context:
    kw = {k: v for k, v in (("library", library), ("store_dir", store_dir)) if v}
    return Context(**kw)


def induce_command(logs: str = typer.Option(..., "--logs", help="A JSONL export, an events.sqlite or a postgres:// URL."),
                   library: Optional[str] = typer.Option(None, "--library", help="Workflow library (default: the bundled one)."),
                   store_dir: Optional[str] = typer.Option(None, "--store-dir", help="Chroma store (default .flowdesk/store)."),
                   min_support: int = typer.Option(MIN_SUPPORT, "--min-support", min=1),
                   min_confidence: float = typer.Option(MIN_CONFIDENCE, "--min-confidence", min=0.0, max=1.0)) -> None:
    """Induce verified WISE-Flow experience from logged sessions into the experience store."""
    from rich.console import Console

    out = build_induce().invoke({"logs": logs, "min_support": min_support, "min_confidence": min_confidence},
                       context=_context(library, store_dir))
    st = out["stats"]
    Console().print(f"{st['events']} events, {st['trajectories']} trajectories {st['partition']}: "
                    f"{st['kept']} of {st['candidates']} candidate prerequisites verified; "
                    f"{len(out['blocks'])} blocks stored {out['stored']}")


logs_app = typer.Typer(help="The session event log.", no_args_is_help=True)


@logs_app.command("export")
def logs_export(out: Path = typer.Option(..., "--out", help="JSONL file to write (one event per line)."),
                thread: Optional[str] = typer.Option(None, "--thread", help="Only this conversation."),
                since: Optional[str] = typer.Option(None, "--since", help="Only events at or after this ISO date/time."),
                log: Optional[str] = typer.Option(None, "--log", help="Event log (default: beside the checkpoints).")) -> None:
    """Write the logged events as JSONL (fields: see memory/events.py)."""
    from datetime import datetime

    from memory.events import open_event_log

    if since:
        try:
            datetime.fromisoformat(since)
        except ValueError:
            raise typer.BadParameter(f"{since!r} is not an ISO date (YYYY-MM-DD[THH:MM])", param_hint="--since")
    location = log or default_log()
    if not location.startswith(("postgres://", "postgresql://")) and not Path(location).is_file():
        raise typer.BadParameter(f"{location}: no event log there yet (run a conversation first)", param_hint="--log")
    with open_event_log(location) as ev:
        n = ev.export_jsonl(out, thread=thread, since=since)
    typer.echo(f"{n} events -> {out}")


experience_app = typer.Typer(help="The induced experience (WISE-Flow blocks) in the store.", no_args_is_help=True)
_LIB = typer.Option(None, "--library", help="Workflow library (default: the bundled one).")
_STORE = typer.Option(None, "--store-dir", help="Chroma store (default .flowdesk/store).")


def _store(library: str | None, store_dir: str | None):
    from graph.resources import get_resources

    res = get_resources(_context(library, store_dir))
    if res.experience is None:
        raise typer.BadParameter("no Chroma store (the workflow search runs degraded)", param_hint="--store-dir")
    return res.experience, res.library_key


@experience_app.command("list")
def experience_list(library: Optional[str] = _LIB, store_dir: Optional[str] = _STORE,
                    workflow: Optional[str] = typer.Option(None, "--workflow")) -> None:
    """The library's blocks: id, kind, support, confidence."""
    from rich.console import Console
    from rich.table import Table

    store, key = _store(library, store_dir)
    table = Table("id", "kind", "workflow", "action", "support", "confidence", "prerequisites")
    for b in store.blocks(key, workflow):
        table.add_row(b.id, b.kind, b.workflow, b.action, str(b.support), f"{b.confidence:.2f}",
                      ", ".join(p.requires for p in b.prerequisites))
    Console().print(table)


@experience_app.command("show")
def experience_show(block_id: str = typer.Argument(..., help="A block id from `flowdesk experience list`."),
                    library: Optional[str] = _LIB, store_dir: Optional[str] = _STORE) -> None:
    """One block as JSON and as the executor sees it."""
    store, _ = _store(library, store_dir)
    b = store.get(block_id)
    if b is None:
        raise typer.BadParameter(f"no block {block_id!r}", param_hint="BLOCK_ID")
    typer.echo(json.dumps(b.model_dump(), indent=2))
    typer.echo(b.text)


@experience_app.command("prune")
def experience_prune(library: Optional[str] = _LIB, store_dir: Optional[str] = _STORE,
                     min_support: int = typer.Option(MIN_SUPPORT, "--min-support", min=1),
                     min_confidence: float = typer.Option(MIN_CONFIDENCE, "--min-confidence", min=0.0, max=1.0),
                     everything: bool = typer.Option(False, "--all", help="Delete every block of the library.")) -> None:
    """Delete the library's blocks below the thresholds, or of workflows the library no longer has."""
    from graph.resources import get_resources

    store, key = _store(library, store_dir)
    workflows = get_resources(_context(library, store_dir)).library.workflows
    gone = [b.id for b in store.blocks(key) if everything or b.workflow not in workflows
            or (b.kind == "action" and (b.support < min_support or b.confidence < min_confidence))]
    typer.echo(f"{store.delete(gone)} blocks deleted")
