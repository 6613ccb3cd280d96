"""The experience store: WISE-Flow blocks induced from logged sessions, in Chroma beside the workflows.

A ``Block`` is one unit of experience for one workflow (``memory.induce`` makes them):

- ``workflow`` block — the task's induced procedure: ``planned_steps`` (the most frequent clean path of
  tool calls), ``entry_steps`` and ``next_steps`` (the directly-follows graph with counts);
- ``action`` block — one action (an API) with its **prerequisites**: actions that must have succeeded
  before it (``kind="action"``, with ``provides``: the arguments whose values came from that action's
  result — argument provenance), argument values (``kind="argument"``: ``requires`` names the
  argument, ``relation`` what its value must satisfy — ``differs`` from ``other``, the value an
  earlier action's argument had (``verify_identity.pin``), or lie in the ``past``/``future`` — learned
  by contrasting the action's failed calls with its successful ones) and confirmations
  (``kind="confirmation"``), each with ``support`` (clean runs where it held before the action),
  ``confidence`` (share of the action's successful runs where it held) and ``error_share`` (share of
  the action's failed calls where it was missing);
- ``contrast`` block — what recovered runs did between an error and the success, what failed runs
  lacked that clean runs had.

Storage: one Chroma collection ``experience`` (``<namespace>-experience`` when the library's search
collections are namespaced) in the same client as the workflow representations — the embedded store
directory or the ``chroma run`` server — one document per block (its ``text``, embedded by the project's
embedder), metadata ``{library, workflow, kind, action, block}`` (``block`` = the block's JSON).
Upserts by block id make induction incremental (a block induced again replaces itself); ``library``
is the library key (``library_key``: its workflows and their APIs), so a store can hold the experience
of several libraries and a PDL edit that keeps the tools keeps its experience.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Literal

from pydantic import BaseModel, Field

COLLECTION = "experience"


class Prerequisite(BaseModel):
    kind: Literal["action", "argument", "confirmation"]
    requires: str  # the action (API) / argument / confirmed action that must hold before
    provides: list[str] = Field(default_factory=list)  # arguments whose values came from ``requires``' result
    support: int = 0  # clean runs where it held before the action
    confidence: float = 0.0  # share of the action's successful runs where it held
    error_share: float = 0.0  # share of the action's failed calls where it was missing
    errors: int = 0  # failed calls of the action where it was missing (argument: where the value broke it)
    relation: Literal["", "differs", "past", "future"] = ""  # argument prerequisites: what the value satisfies
    other: str = ""  # relation "differs": the earlier "action.argument" whose value it must not reuse
    broken_ok: int = 0  # argument prerequisites: successful calls that broke it (no cause of errors if many)


class Step(BaseModel):
    action: str
    count: int = 0
    condition: str = ""  # when it follows (e.g. "after check_funds returned has_funds=True")


class Block(BaseModel):
    """One induced, verified piece of experience (see the module docstring)."""

    id: str
    kind: Literal["workflow", "action", "contrast"]
    library: str  # library_key of the library the logs ran on
    workflow: str
    action: str = ""  # action blocks: the API
    description: str = ""
    prerequisites: list[Prerequisite] = Field(default_factory=list)
    planned_steps: list[str] = Field(default_factory=list)
    entry_steps: list[str] = Field(default_factory=list)
    next_steps: list[Step] = Field(default_factory=list)
    support: int = 0  # trajectories it was induced from
    confidence: float = 0.0
    sessions: int = 0  # trajectories of the workflow in the logs
    source: str = "offline"  # "offline" (process mining) | "llm" (the paper's prompts, verified on the traces)

    @property
    def text(self) -> str:
        """The block as the LLM executor sees it (WISE-Flow's compact block)."""
        if self.kind == "workflow":
            return (f"[workflow {self.workflow}] {self.description} Planned steps: "
                    f"{' -> '.join(self.planned_steps) or '-'} (from {self.support} clean sessions of {self.sessions}).")
        if self.kind == "action":
            pres = "; ".join(f"{p.kind} {p.requires}" + (f" (provides {', '.join(p.provides)})" if p.provides else "")
                             + (f" {p.relation} {p.other}".rstrip() if p.relation else "")
                             + f" [support {p.support}, confidence {p.confidence:.2f}]" for p in self.prerequisites)
            return f"[action {self.workflow}.{self.action}] {self.description} Prerequisites: {pres or 'none'}."
        return f"[contrast {self.workflow}] {self.description}"


def library_key(library) -> str:
    """A library's experience key: its workflows and their APIs (the tool surface the logs ran on)."""
    surface = sorted((name, sorted(a.name for a in wf.apis)) for name, wf in library.workflows.items())
    return hashlib.sha1(json.dumps(surface).encode()).hexdigest()[:12]


class ExperienceStore:
    """The ``experience`` collection of an open Chroma client (``memory.store.WorkflowStore.client``)."""

    def __init__(self, client, embedder, namespace: str = ""):
        self.embedder = embedder
        self.col = client.get_or_create_collection(
            f"{namespace}-{COLLECTION}" if namespace else COLLECTION, embedding_function=None,
            configuration={"hnsw": {"space": "cosine"}}, metadata={"embedder": embedder.name})

    def upsert(self, blocks: Iterable[Block]) -> dict[str, int]:
        """Add or replace blocks by id; returns {"added", "updated", "unchanged"}."""
        blocks = list(blocks)
        if not blocks:
            return {"added": 0, "updated": 0, "unchanged": 0}
        old = self.col.get(ids=[b.id for b in blocks], include=["metadatas"])
        known = {i: (m or {}).get("block") for i, m in zip(old["ids"], old["metadatas"])}
        todo = [b for b in blocks if known.get(b.id) != b.model_dump_json()]
        if todo:
            self.col.upsert(ids=[b.id for b in todo], documents=[b.text for b in todo],
                            embeddings=self.embedder.embed([b.text for b in todo]),
                            metadatas=[self._meta(b) for b in todo])
        added = sum(1 for b in todo if b.id not in known)
        return {"added": added, "updated": len(todo) - added, "unchanged": len(blocks) - len(todo)}

    @staticmethod
    def _meta(b: Block) -> dict[str, Any]:
        return {"library": b.library, "workflow": b.workflow, "kind": b.kind, "action": b.action,
                "block": b.model_dump_json()}

    def blocks(self, library: str | None = None, workflow: str | None = None) -> list[Block]:
        conds = [{k: v} for k, v in (("library", library), ("workflow", workflow)) if v]
        where = None if not conds else conds[0] if len(conds) == 1 else {"$and": conds}
        got = self.col.get(where=where, include=["metadatas"])
        return sorted((Block.model_validate_json(m["block"]) for m in got["metadatas"]), key=lambda b: b.id)

    def search(self, query: str, library: str, workflow: str, k: int = 3) -> list[Block]:
        """The blocks of ``workflow`` closest to ``query`` (the user's intention), best first."""
        n = min(k, self.col.count())
        if not n:
            return []
        where = {"$and": [{"library": library}, {"workflow": workflow}]}
        res = self.col.query(query_embeddings=[self.embedder.embed([query or workflow])[0]], n_results=n,
                             where=where, include=["metadatas"])
        return [Block.model_validate_json(m["block"]) for m in res["metadatas"][0]]

    def get(self, block_id: str) -> Block | None:
        got = self.col.get(ids=[block_id], include=["metadatas"])
        return Block.model_validate_json(got["metadatas"][0]["block"]) if got["ids"] else None

    def delete(self, ids: list[str]) -> int:
        if ids:
            self.col.delete(ids=ids)
        return len(ids)

    def count(self) -> int:
        return self.col.count()
