"""The extraction pipeline: transcripts -> one workflow per task -> a PDL library tree on disk.

Steps: group the conversations by task (``cluster_by_content`` when the logs carry no task label);
drop the steps another task performs far more often (conversations that moved on without saying so);
optionally keep only Proc-Sim's most representative conversations per task (``select``); mine each task
(``mining.build_workflow``) and write ``<domain>/<role>/<task>.yaml`` with ``_domain.yaml`` / ``_role.yaml``.
The embedder, the dataset's tool bindings and its domain grouping are passed in by the caller.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..importers.common import slugify, write_library
from ..pdl import Binding, Domain, Role, Workflow
from .elements import Embed, bag_embed, representative
from .mining import MinedGraph, MiningConfig, build_workflow, common_steps, foreign_steps, step_support, traces
from .transcripts import Transcript


@dataclass
class ExtractionResult:
    root: Path
    workflows: dict[str, Workflow] = field(default_factory=dict)
    graphs: dict[str, MinedGraph] = field(default_factory=dict)
    representatives: dict[str, list[str]] = field(default_factory=dict)  # task -> conversation ids, best first
    conversations: int = 0
    seconds: float = 0.0


def cluster_by_content(transcripts: Sequence[Transcript]) -> dict[str, list[Transcript]]:
    """Conversations without a task label, grouped by what the agent did: the APIs they call (a task is
    served by its APIs), else their most used action.  Group names are ``task_<api or action>``."""
    groups: dict[str, list[Transcript]] = defaultdict(list)
    for t in transcripts:
        apis = sorted({turn.api.name for turn in t.turns if turn.api is not None})
        if apis:
            key = "_".join(apis)
        else:
            steps = Counter(turn.step for turn in t.turns if turn.step)
            key = steps.most_common(1)[0][0] if steps else "conversation"
        groups[slugify("task_" + key)].append(t)
    return dict(groups)


def group_by_task(transcripts: Sequence[Transcript]) -> dict[str, list[Transcript]]:
    groups: dict[str, list[Transcript]] = defaultdict(list)
    unlabelled = []
    for t in transcripts:
        (groups[t.task].append(t) if t.task else unlabelled.append(t))
    for name, ts in cluster_by_content(unlabelled).items():
        groups[name if name not in groups else name + "_unlabelled"].extend(ts)
    return dict(sorted(groups.items()))


def _description(task: str, ts: Sequence[Transcript]) -> str:
    """The task in words: its name, and the opening request of its most representative conversation."""
    title = task.replace("_", " ").capitalize()
    for t in ts:
        first = next((turn.text for turn in t.turns if turn.speaker == "user" and len(turn.text.split()) >= 3), "")
        if first:
            return f"{title}. A typical request: \"{' '.join(first.split()[:40])}\""
    return f"{title}."


def extract_library(transcripts: Sequence[Transcript], out_dir: str | Path, config: MiningConfig | None = None, *,
                    embed: Embed | None = None, select: int = 0,
                    domain_of: Callable[[str, Sequence[Transcript]], str] | None = None,
                    binding_for: Callable[[str], Binding | None] | None = None,
                    outputs_for: Callable[[str], set[str] | None] | None = None,
                    domain_text: dict[str, str] | None = None,
                    polarity: Callable[[str], bool | None] | None = None,
                    llm: tuple[str, Callable] | None = None, llm_conversations: int = 5,
                    progress: Callable[[str], None] | None = None) -> ExtractionResult:
    """``embed``: the embedding for Proc-Sim (default ``bag_embed``, the offline one); ``select`` > 0 mines
    only the ``select`` most representative conversations per task; ``polarity`` reads user replies as
    yes/no (``mining.mine_graph``); ``outputs_for(api)``: the fields an API is documented to return (API
    returns and branch tests keep to them; None = unknown, the recorded results decide); ``llm`` = (method,
    chat) extracts with a model instead of the miner (``qa_cot.extract_llm``, from ``llm_conversations``
    representatives); ``progress(task)`` after each task."""
    embed = embed or bag_embed
    t0 = time.perf_counter()
    groups = group_by_task(transcripts)
    supports = {task: step_support(traces(ts)) for task, ts in groups.items()}
    foreign = foreign_steps(supports)
    contested = foreign_steps(supports, ratio=1.0)  # steps another task performs more often
    common = common_steps(supports)
    result = ExtractionResult(Path(out_dir), conversations=len(transcripts))
    for task, ts in groups.items():
        reps = representative(ts, embed, select or len(ts))
        result.representatives[task] = [t.id for t in reps[:10]]
        mined_from = reps if select else ts
        domain = (domain_of(task, ts) if domain_of else None) or next((t.domain for t in ts if t.domain), None) \
            or "general"
        role = next((t.role for t in ts if t.role), None) or f"{task.split('_')[0]}_agent"
        try:
            if llm is not None:
                from .qa_cot import extract_llm

                wf = extract_llm(llm[0], task, reps[:llm_conversations], llm[1], domain=domain, role=role,
                                 description=_description(task, reps))
                result.workflows[task] = wf
                if progress:
                    progress(task)
                continue
            wf, graph = build_workflow(task, list(mined_from), config, domain=domain, role=role,
                                       description=_description(task, reps), binding_for=binding_for,
                                       exclude=foreign[task], polarity=polarity, common=common,
                                       outputs=outputs_for, contested=contested[task])
        except ValueError as exc:  # a task with too little signal is reported, not fatal for the others
            if progress:
                progress(task)
            result.graphs[task] = MinedGraph({}, {}, {})
            result.representatives[task].insert(0, f"skipped: {exc}")
            continue
        result.workflows[task] = wf
        result.graphs[task] = graph
        if progress:
            progress(task)
    wfs = list(result.workflows.values())
    domains = [Domain(name=d, title=d.replace("_", " ").capitalize(),
                      description=(domain_text or {}).get(d) or f"Workflows extracted from conversations: {d}.")
               for d in sorted({w.domain for w in wfs})]
    roles: dict[str, Role] = {}
    for w in wfs:
        names = ", ".join(x.name.replace("_", " ") for x in wfs if x.role == w.role)
        roles.setdefault(w.role, Role(name=w.role, title=w.role.replace("_", " "), domain=w.domain,
                                      description=f"Assistant for {names} (extracted from conversations)."))
    write_library(out_dir, domains, roles.values(), wfs)
    result.seconds = time.perf_counter() - t0
    return result
