"""Procedural elements of a conversation and Proc-Sim selection of the most representative ones.

The elements (Conversations->Workflows, ``../shared/DESIGN.md`` §1): the intent, the slots the API
calls filled, the agent's actions in order, and the conditions that led to branches (the values an API
returned, the user's yes/no-like answers are left to the miner).  ``element_text`` writes them as one
line; Proc-Sim embeds those lines, takes their centroid and keeps the ``k`` conversations closest to it.
The embedding function is passed in (``memory.embeddings`` provides one), so this module stays pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .transcripts import Transcript

Embed = Callable[[list[str]], "np.ndarray"]


@dataclass
class ProceduralElements:
    intent: str
    slots: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    conditions: list[str] = field(default_factory=list)

    def text(self) -> str:
        return (f"intent: {self.intent}; slots: {', '.join(self.slots) or '-'}; "
                f"actions: {' > '.join(self.actions) or '-'}; conditions: {'; '.join(self.conditions) or '-'}")


def elements_of(t: Transcript) -> ProceduralElements:
    slots: list[str] = []
    actions: list[str] = []
    conditions: list[str] = []
    for turn in t.turns:
        step = turn.step
        if step and (not actions or actions[-1] != step):
            actions.append(step)
        if turn.api is not None:
            slots.extend(k for k in turn.api.args if k not in slots)
            res = turn.api.result or {}
            short = [f"{k}={v}" for k, v in res.items() if isinstance(v, (str, int, bool)) and len(str(v)) <= 40]
            conditions.append(f"{step}: " + (", ".join(short[:3]) if res else "nothing found"))
    return ProceduralElements(t.task or "unknown", slots, actions, conditions)


def bag_embed(texts: list[str]) -> np.ndarray:
    """The offline embedding of procedural elements: counts of their tokens (action labels, slot names,
    returned values) over the batch's vocabulary. Deterministic and fast; ``memory.embeddings`` gives
    dense ones (``--embedder minilm``)."""
    toks = [re.findall(r"[A-Za-z0-9_=.]+", t) for t in texts]
    vocab = {w: i for i, w in enumerate(sorted({w for ts in toks for w in ts}))}
    out = np.zeros((len(texts), max(1, len(vocab))), dtype=np.float32)
    for r, ts in enumerate(toks):
        for w in ts:
            out[r, vocab[w]] += 1.0
    return out


def proc_sim(texts: Sequence[str], embed: Embed, k: int) -> list[int]:
    """Indexes of the ``k`` texts whose embeddings are closest (cosine) to the centroid, best first."""
    if not texts:
        return []
    vecs = np.asarray(embed(list(texts)), dtype=np.float32)
    vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    centroid = vecs.mean(axis=0)
    centroid /= max(float(np.linalg.norm(centroid)), 1e-12)
    scores = vecs @ centroid
    order = sorted(range(len(texts)), key=lambda i: (-float(scores[i]), i))
    return order[:k] if k > 0 else order


def representative(transcripts: Sequence[Transcript], embed: Embed, k: int) -> list[Transcript]:
    """Proc-Sim: the ``k`` conversations whose procedural elements are most typical of their task."""
    picked = proc_sim([elements_of(t).text() for t in transcripts], embed, k)
    return [transcripts[i] for i in picked]
