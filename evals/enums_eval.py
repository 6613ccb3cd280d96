"""``flowdesk eval enums``: how often the option nearest to a user's words (``dialogue.understanding.enums``)
is the value of an enum slot, on SGD's categorical slots, and the lead that reader needs.

Rows: SGD user turns x enum slots of their service (at least two options an answer can mean) whose value
``slots.match_enum`` does not read.
- *asked, value*: the agent's previous turn asked for the slot and the turn's dialogue state gains one of
  its options (the reader should name it);
- *asked, another question*: the agent asked for another slot of the service and the turn gives no value
  for this one — the answer to another question, scored as if this slot had been asked (the reader should
  name nothing: the stand-in for an answer that is not about the slot; weighted to count as much as the
  answers with a value, ``counts``);
- *not asked*: the slot was not asked (with or without a value), reported to show why the reader only
  reads asked slots.
For every lead over the next option of a grid, options right and wrong; the lead with the most right minus
``FP_COST`` x wrong on train (asked rows) is the reader's ``enums.MIN_LEAD`` (the report shows both).
Dev is reported, never chosen on.  Writes ``report.md``, ``metrics.json`` and ``enums.png``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import typer

from .datasets import default_data_dir

FP_COST = 2.0
LEADS = tuple(round(0.025 * i, 3) for i in range(13))  # 0 .. 0.3


@dataclass(frozen=True)
class Row:
    kind: str  # "value" (asked, value given), "other" (another slot asked, none given), "unasked"
    text: str
    options: tuple[str, ...]
    gold: str | None


def sgd_rows(data: Path, split: str, cache: Path, every: int = 1) -> list[Row]:
    from dialogue.understanding.enums import readable
    from dialogue.understanding.slots import match_enum, slot_kind
    from workflows.library import load_library

    from .datasets.sgd import every_dialogue, library, user_turns

    lib = load_library(library(data, cache / f"sgd-{split}", split))
    enum_slots: dict[str, dict[str, tuple[str, ...]]] = defaultdict(dict)
    for wf in lib.workflows.values():
        service = next((t.split(":", 1)[1] for t in wf.tags if t.startswith("service:")), "")
        for s in wf.slots:
            if slot_kind(s) == "enum" and len(opts := readable(s.enum or [])) >= 2:
                enum_slots[service][s.name] = tuple(opts)
    out: list[Row] = []
    for raw in every_dialogue(data, split, every):
        state: dict[str, dict] = defaultdict(dict)
        for turn, asked in user_turns(raw):
            text = turn["utterance"]
            for f in turn.get("frames", []):
                service = f["service"]
                before, state[service] = state[service], dict(f.get("state", {}).get("slot_values", {}))
                gained = {n: v[0] for n, v in state[service].items() if v and v != before.get(n)}
                for name, options in enum_slots.get(service, {}).items():
                    gold = gained.get(name)
                    if name in gained and gold not in options:
                        continue  # "dontcare" and the like: no option to name
                    if match_enum(text, list(options), whole=name in asked[service]) is not None:
                        continue  # the rules read it
                    if name in asked[service]:
                        if gold is not None:
                            out.append(Row("value", text, options, gold))
                    elif asked[service] and gold is None:
                        out.append(Row("other", text, options, None))
                    elif name not in before or gold is not None:
                        out.append(Row("unasked", text, options, gold))
    return out


def scored(rows: list[Row], embed) -> list[tuple[Row, str, float, float]]:
    from dialogue.understanding.enums import nearest

    out = []
    for r in rows:
        found = nearest(r.text, r.options, embed)
        if found is not None:
            out.append((r, *found))
    return out


def counts(rows: list[tuple[Row, str, float, float]], kinds: tuple[str, ...], lead: float) -> dict:
    """Options right and wrong at a lead over the next option.  The answers to another question are
    weighted to count, all together, as much as the answers with a value (``balanced``): as likely an answer
    beside the point as one in other words — a cautious prior, since most replies to a question answer it."""
    n = {kind: sum(1 for r, *_ in rows if r.kind == kind) for kind in ("value", "other", "unasked")}
    weight = {"other": n["value"] / n["other"] if n["other"] else 0.0}
    right = wrong = 0
    balanced = 0.0
    for r, option, _, gap in rows:
        if r.kind in kinds and gap >= lead:
            right += option == r.gold
            wrong += option != r.gold
            balanced += weight.get(r.kind, 1.0) * (option != r.gold)
    values = sum(1 for r, *_ in rows if r.kind in kinds and r.gold is not None)
    return {"values": values, "right": right, "wrong": wrong, "wrong_balanced": round(balanced, 1),
            "net": round(right - FP_COST * balanced, 1),
            "precision": round(right / (right + balanced), 3) if right + balanced else 0.0,
            "recall": round(right / values, 3) if values else 0.0}


class _Table:
    """Every sentence's embedding, computed once in batches (with progress)."""

    def __init__(self, rows: list[Row], embedder, progress=None):
        from dialogue.understanding.enums import clauses, option_text

        texts = list(dict.fromkeys(t for r in rows for t in [*clauses(r.text), r.text, *map(option_text, r.options)]))
        task = progress.add_task("embedding", total=len(texts)) if progress else None
        self.vectors: dict[str, np.ndarray] = {}
        for i in range(0, len(texts), 256):
            batch = texts[i:i + 256]
            self.vectors.update(zip(batch, np.asarray(embedder.embed(batch), dtype=np.float32)))
            if progress:
                progress.advance(task, len(batch))

    def __call__(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts])


def evaluate(data: Path, report: Path, cache: Path, embedding: str = "minilm", train_every: int = 3,
             dev_every: int = 1, show_progress: bool = True) -> dict:
    from rich.progress import Progress

    from dialogue.understanding.enums import MIN_LEAD
    from memory.embeddings import get_embedder

    started = time.perf_counter()
    with Progress(disable=not show_progress) as prog:
        step = prog.add_task("reading SGD", total=2)
        rows = {"train": sgd_rows(data, "train", cache, train_every), "dev": sgd_rows(data, "dev", cache, dev_every)}
        prog.advance(step)
        table = _Table(rows["train"] + rows["dev"], get_embedder(embedding), prog)
        done = {split: scored(rs, table) for split, rs in rows.items()}
        prog.advance(step)
    asked = ("value", "other")
    grid = {lead: counts(done["train"], asked, lead) for lead in LEADS}
    lead = max(grid, key=lambda k: (grid[k]["net"], -k))
    curve = {split: {"asked": [counts(done[split], asked, x) for x in LEADS],
                     "not asked": [counts(done[split], ("unasked",), x) for x in LEADS]} for split in done}
    summary = {f"{split}, {part}": counts(done[split], kinds, MIN_LEAD)
               for split in ("dev", "train") for part, kinds in (("asked", asked), ("not asked", ("unasked",)))}
    summary["chosen on train"] = {"lead": lead, "reader's MIN_LEAD": MIN_LEAD}
    metrics = {"summary": summary,
               "rows": {split: {kind: sum(1 for r in rs if r.kind == kind) for kind in ("value", "other", "unasked")}
                        for split, rs in rows.items()},
               "train_every": train_every, "dev_every": dev_every, "embedding": embedding,
               "curve": {split: {part: {str(x): c for x, c in zip(LEADS, cs)} for part, cs in parts.items()}
                         for split, parts in curve.items()},
               "seconds": round(time.perf_counter() - started, 1)}
    _write_report(report, metrics, curve)
    return metrics


def _write_report(report: Path, metrics: dict, curve: dict) -> None:
    from .report import Report

    rows, chosen = metrics["rows"], metrics["summary"]["chosen on train"]
    reader_lead = chosen["reader's MIN_LEAD"]
    rep = Report(report, "Enum options said in other words (`flowdesk eval enums`)")
    rep.text("The option nearest to a user's words by sentence embeddings (`dialogue/understanding/enums.py`, "
             f"`{metrics['embedding']}`), on SGD's categorical slots where `match_enum` reads nothing. *Asked*: the "
             "agent just asked for the slot — rows where the turn gives one of its options, and answers to a question "
             "for another slot of the service (no value for this one: whatever the reader names is wrong). *Not "
             f"asked*: the slot was not asked. Train: 1 in {metrics['train_every']} dialogues "
             f"({rows['train']['value']} asked with a value, {rows['train']['other']} answers to another question, "
             f"{rows['train']['unasked']} not asked); dev: 1 in {metrics['dev_every']} ({rows['dev']['value']} / "
             f"{rows['dev']['other']} / {rows['dev']['unasked']}). The answers to another question are weighted to "
             "count as much as the answers with a value (as likely beside the point as in other words). On train "
             "(asked rows), options right minus "
             f"{FP_COST:g} x wrong is highest at a lead of {chosen['lead']} over the next option; the reader uses "
             f"{reader_lead}. "
             "Recall is over the values the rules miss. Not asked, the nearest option is wrong far more often than "
             "right at every lead, so the reader only reads the asked slot.")
    rep.table("At the reader's lead (asked: wrong counts the answers to another question balanced to the "
              "answers with a value)", ["rows", "values", "right", "wrong", "wrong (balanced)", "precision", "recall"],
              [(name, c["values"], c["right"], c["wrong"], c["wrong_balanced"], c["precision"], c["recall"])
               for name, c in metrics["summary"].items() if "right" in c])
    series = {f"{split} {part} precision": [c["precision"] for c in cs]
              for split, parts in curve.items() for part, cs in parts.items()}
    rep.line_plot("enums", list(LEADS), series, "least lead over the next option", "precision",
                  "Nearest option on SGD by lead")
    rep.write(metrics)


def eval_command(
    data: Path = typer.Option(None, help="Directory holding the datasets (default ../shared/data)."),
    out: Path = typer.Option(Path("reports/enums-sgd"), help="Report directory."),
    cache: Path = typer.Option(Path(".flowdesk/eval"), help="Imported libraries."),
    embedding: str = typer.Option("minilm", help="Embedding model (as `Context.embedding`)."),
    train_every: int = typer.Option(3, "--train-every", min=1, help="Read every n-th SGD train dialogue."),
    dev_every: int = typer.Option(1, "--dev-every", min=1, help="Read every n-th SGD dev dialogue."),
) -> None:
    """Measure the reader of enum options said in other words on SGD, and the lead it needs."""
    metrics = evaluate(Path(data) if data else default_data_dir(), out, cache, embedding, train_every, dev_every)
    for name, c in metrics["summary"].items():
        if "right" in c:
            typer.echo(f"{name}: precision {c['precision']:.3f}, recall {c['recall']:.3f} "
                       f"({c['right']} right, {c['wrong']} wrong of {c['values']})")
    typer.echo(f"chosen on train: {metrics['summary']['chosen on train']}; report: {out / 'report.md'}")
