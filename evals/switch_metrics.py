"""Switch-evaluation metrics over per-turn records (FlowSwitch scoring).

- top-k accuracy (k = 1..5): the gold workflow is among the first k predictions; an out-of-scope gold
  (None) is correct only if nothing is predicted.
- MAP@5: with one gold per turn, the reciprocal rank of the gold in the top 5 (out of scope: 1 when
  nothing is predicted, else 0).
- detector accuracy: the detector "predicts a change" when it says SEARCH, or declares the turn out of
  scope while a workflow is active; it is right iff that equals ``gold != prev_gold`` (so STAY is right
  iff the gold equals the previous gold).  Switch recall/precision use the same two booleans.
- searches per turn, and the reduction against retrieving on every turn (1 - searches/turn).
- latency per turn (detector + retrieval), p50 and p95 in milliseconds.
The predicted list on a STAY turn is ``[active workflow]`` (``[]`` when none or out of scope); the
closed loop (``evals/switch_loop.py``) ranks the active pick's belief after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

KS = (1, 2, 3, 4, 5)


@dataclass
class TurnRecord:
    gold: str | None
    prev_gold: str | None
    predicted: list[str] = field(default_factory=list)
    decision: str = "SEARCH"  # "STAY" | "SEARCH"
    out_of_scope: bool = False  # the detector declared the turn out of scope
    active: str | None = None  # the active workflow the detector saw
    searched: bool = True
    latency_ms: float = 0.0

    @property
    def gold_changed(self) -> bool:
        return self.gold != self.prev_gold

    @property
    def predicted_change(self) -> bool:
        return self.decision == "SEARCH" or (self.out_of_scope and self.active is not None)


def hit_at(rec: TurnRecord, k: int) -> bool:
    if rec.gold is None:
        return not rec.predicted
    return rec.gold in rec.predicted[:k]


def reciprocal_rank(rec: TurnRecord, k: int = 5) -> float:
    if rec.gold is None:
        return 1.0 if not rec.predicted else 0.0
    top = rec.predicted[:k]
    return 1.0 / (top.index(rec.gold) + 1) if rec.gold in top else 0.0


def _mean(values) -> float:
    values = list(values)
    return float(np.mean(values)) if values else float("nan")


def compute(records: list[TurnRecord]) -> dict[str, float]:
    """Every figure for one configuration (NaN where a figure has no turns)."""
    out: dict[str, float] = {"turns": float(len(records))}
    for k in KS:
        out[f"top{k}"] = _mean(hit_at(r, k) for r in records)
    out["map"] = _mean(reciprocal_rank(r) for r in records)
    stay = [r for r in records if not r.gold_changed]
    switch = [r for r in records if r.gold_changed]
    out["top1_stay_turns"] = _mean(hit_at(r, 1) for r in stay)
    out["top1_switch_turns"] = _mean(hit_at(r, 1) for r in switch)
    out["detector_accuracy"] = _mean(r.predicted_change == r.gold_changed for r in records)
    out["switch_recall"] = _mean(r.predicted_change for r in switch)
    flagged = [r for r in records if r.predicted_change]
    out["switch_precision"] = _mean(r.gold_changed for r in flagged)
    out["searches_per_turn"] = _mean(r.searched for r in records)
    out["search_reduction"] = 1.0 - out["searches_per_turn"] if records else float("nan")
    lat = [r.latency_ms for r in records]
    out["latency_p50_ms"] = float(np.percentile(lat, 50)) if lat else float("nan")
    out["latency_p95_ms"] = float(np.percentile(lat, 95)) if lat else float("nan")
    return out
