"""Coverage of a library's procedures by conversation tests: per workflow, which procedure steps
(API and ANSWER calls, by line), which branches (each ``if``/``elif``/``else`` arm and ``while`` body)
and which APIs the test cases exercised.

What ran comes from the cases' environment and assistant events (``CaseResult.exercised``: the API and
ANSWER nodes each workflow instance executed); a step is covered when its node ran in that workflow, a
branch when a call of its body ran.  An arm without calls (``pass``) leaves no trace, so it is not
counted rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from workflows.library import Library
from workflows.procedure import Call, If, Step, While, iter_calls, parse_procedure


@dataclass
class Branch:
    line: int
    label: str  # "if available", "else", "while ..."
    calls: list[str]  # the nodes of its body

    def hit(self, ran: set[str]) -> bool:
        return any(c in ran for c in self.calls)


@dataclass
class WorkflowCoverage:
    workflow: str
    steps: list[tuple[int, str]]  # (line, node) of every call in the procedure
    branches: list[Branch]
    apis: list[str]
    ran: set[str] = field(default_factory=set)

    @property
    def steps_hit(self) -> list[tuple[int, str]]:
        return [s for s in self.steps if s[1] in self.ran]

    @property
    def branches_hit(self) -> list[Branch]:
        return [b for b in self.branches if b.hit(self.ran)]

    @property
    def apis_hit(self) -> list[str]:
        return [a for a in self.apis if a in self.ran]

    def missing(self) -> list[str]:
        out = [f"step {node} (line {line})" for line, node in self.steps if node not in self.ran]
        out += [f"branch '{b.label}' (line {b.line})" for b in self.branches if not b.hit(self.ran)]
        return out

    @property
    def complete(self) -> bool:
        return not self.missing() and len(self.apis_hit) == len(self.apis)


def _branches(steps: list[Step]) -> list[Branch]:
    out: list[Branch] = []
    for st in steps:
        if isinstance(st, If):
            for i, (_test, source, body) in enumerate(st.branches):
                out.append(Branch(_line(body, st.line), f"{'if' if i == 0 else 'elif'} {source}",
                                  [c.name for c in iter_calls(body)]))
                out += _branches(body)
            if st.orelse:
                out.append(Branch(_line(st.orelse, st.line), "else", [c.name for c in iter_calls(st.orelse)]))
                out += _branches(st.orelse)
        elif isinstance(st, While):
            out.append(Branch(st.line, f"while {st.source}", [c.name for c in iter_calls(st.body)]))
            out += _branches(st.body)
    return [b for b in out if b.calls]  # an arm without calls leaves no trace to measure


def _line(body: list[Step], default: int) -> int:
    return next((getattr(s, "line", default) for s in body), default)


def measure(library: Library, exercised: Iterable[dict[str, list[str]]],
            workflows: Iterable[str] | None = None) -> list[WorkflowCoverage]:
    """Coverage per workflow of ``library`` (or the named ones) from the cases' exercised nodes."""
    ran: dict[str, set[str]] = {}
    for ex in exercised:
        for wf, nodes in ex.items():
            ran.setdefault(wf, set()).update(nodes)
    out = []
    for name in sorted(workflows or library.workflows):
        wf = library.workflows[name]
        proc = parse_procedure(wf.procedure)
        calls: list[Call] = list(iter_calls(proc.steps))
        out.append(WorkflowCoverage(name, [(c.line, c.name) for c in calls], _branches(proc.steps),
                                    [a.name for a in wf.apis], ran.get(name, set())))
    return out


def summary_rows(cov: list[WorkflowCoverage]) -> list[list[str]]:
    rows = []
    for c in cov:
        rows.append([c.workflow, f"{len(c.steps_hit)}/{len(c.steps)}", f"{len(c.branches_hit)}/{len(c.branches)}",
                     f"{len(c.apis_hit)}/{len(c.apis)}", "; ".join(c.missing() + [f"API {a}" for a in c.apis
                                                                                   if a not in c.ran]) or "—"])
    return rows
