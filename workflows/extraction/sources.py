"""Where conversations come from: a dataset (``star``, ``abcd``) or a transcripts file, plus what the
dataset knows about its workflows (domain grouping, executable tool bindings).

ABCD: only the sample conversations ship here (``abcd/abcd_sample.json``). Each becomes a transcript
whose task is its subflow; agent actions (``take_action`` turns) are API calls named after the button
(``pull-up-account`` -> ``pull_up_account``) with the ontology's slot names as arguments.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..importers.common import dataset_dir, identifier
from ..pdl import Binding
from .transcripts import ApiCall, Transcript, TranscriptTurn, load_transcripts

DATASETS = ("star", "abcd")


@dataclass
class Source:
    transcripts: list[Transcript]
    label: str
    domain_of: Callable[[str, Sequence[Transcript]], str] | None = None
    binding_for: Callable[[str], Binding | None] | None = None
    outputs_for: Callable[[str], set[str] | None] | None = None  # fields an API is documented to return
    domain_text: dict[str, str] = field(default_factory=dict)


def _abcd_transcripts(data: Path) -> list[Transcript]:
    root = dataset_dir(data, "abcd", "abcd_sample.json")
    convs = json.loads((root / "abcd_sample.json").read_text(encoding="utf-8"))
    onto = json.loads((root / "ontology.json").read_text(encoding="utf-8"))
    params = {k: v for kind in onto.get("actions", {}).values() for k, v in kind.items()}
    out = []
    for c in convs:
        sc = c.get("scenario", {})
        turns: list[TranscriptTurn] = []
        for t in c.get("delexed", []):
            if t.get("speaker") == "action":
                _, _, button, values = (t.get("targets") or [None] * 4)[:4]
                names = params.get(button, [])
                args = {names[i] if i < len(names) else f"value_{i}": v for i, v in enumerate(values or [])}
                turns.append(TranscriptTurn(speaker="agent", text=t.get("text", ""),
                                            api=ApiCall(name=identifier(button.replace("-", "_")), args=args, result={})))
            else:
                turns.append(TranscriptTurn(speaker="user" if t.get("speaker") == "customer" else "agent",
                                            text=t.get("text", "")))
        # the subflow as the action targets name it (``timing`` for the scenario's ``timing_4``): kb.json's keys
        first = next((t["targets"][0] for t in c.get("delexed", []) if t.get("targets") and t["targets"][0]), None)
        out.append(Transcript(id=str(c.get("convo_id")), task=identifier(first or sc.get("subflow", "unknown")),
                              domain=identifier(sc.get("flow", "general")), turns=turns))
    return out


def abcd_guideline_charts(data: str | Path) -> dict:
    """ABCD's required action sequence per subflow (``kb.json``) as chain flowcharts of API-step names."""
    from ..importers.mermaid import Edge, Flowchart, Node

    root = dataset_dir(Path(data), "abcd", "kb.json")
    out = {}
    for sub, buttons in json.loads((root / "kb.json").read_text(encoding="utf-8")).items():
        names = [identifier(b.replace("-", "_")) for b in buttons]
        chart = Flowchart()
        for n in names:
            chart.nodes[n] = Node(n, n)
        chart.edges = [Edge(a, b) for a, b in zip(names, names[1:])]
        out[identifier(sub)] = chart
    return out


def load_source(dataset: str | None = None, data: str | Path | None = None, split: str = "train",
                transcripts: str | Path | None = None, every: int = 1, limit: int = 0) -> Source:
    """Exactly one of ``dataset`` (with ``data``) or ``transcripts``."""
    if bool(dataset) == bool(transcripts):
        raise ValueError("give either a dataset (star|abcd) with its data directory, or a transcripts file")
    if transcripts:
        return Source(load_transcripts(transcripts), str(transcripts))
    if dataset == "star":
        from ..importers import star_kb
        from ..importers.star import DOMAIN_TEXT, domain_of
        from .star import load_star_transcripts, star_dir

        star_kb.register_data_dir(star_dir(data))

        def outputs_for(api: str) -> set[str] | None:  # the API spec's outputs: what the bound tool returns
            try:
                return star_kb.returned_fields(api)
            except KeyError:
                return None

        return Source(load_star_transcripts(data, split, limit, every), f"STAR {split}",
                      domain_of=lambda task, _ts: domain_of(task),
                      binding_for=lambda api: Binding(python=f"workflows.importers.star_kb:{api}"),
                      outputs_for=outputs_for, domain_text=dict(DOMAIN_TEXT))
    if dataset == "abcd":
        return Source(_abcd_transcripts(Path(data)), "ABCD samples")
    raise ValueError(f"unknown dataset {dataset!r}; choose one of {', '.join(DATASETS)}")
