"""Runtime configuration of the agent (LangGraph ``context_schema``), read from the environment.

Every field can be set by an environment variable named ``FLOWDESK_<FIELD>`` (upper case), by
LangGraph Studio's configuration panel, or in Python with ``Context(...)``.  Models are
``provider:model`` strings (``openai:gpt-4o-mini``) or ``offline`` for the deterministic policies.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Literal

from workflows.library import bundled_library_path


def _env(name: str, default):
    raw = os.environ.get(f"FLOWDESK_{name.upper()}")
    if raw is None or raw == "":
        return default
    if isinstance(default, bool):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    return raw


@dataclass(kw_only=True)
class Context:
    """Runtime configuration. Environment: FLOWDESK_<FIELD>, e.g. FLOWDESK_RETRIEVER=bm25."""

    library: str = field(default=str(bundled_library_path()),
                         metadata={"description": "Workflow library directory (domain/role/workflow.yaml)."})
    store_dir: str = field(default=".flowdesk/store",
                           metadata={"description": "Chroma persist directory and embedding cache."})
    chroma_url: str = field(default="", metadata={
        "description": "Chroma server (`chroma run`), e.g. http://127.0.0.1:8000; empty = embedded store in store_dir."})
    db_path: str = field(default=".flowdesk/demo.sqlite",
                         metadata={"description": "SQLite database behind the demo library's tools."})
    detector_model: str = field(default="offline", metadata={"description": "Switch detector: offline | provider:model."})
    router_model: str = field(default="offline", metadata={"description": "Domain/role router: offline | provider:model."})
    executor_model: str = field(default="offline", metadata={"description": "PDL executor: offline | provider:model."})
    base_url: str = field(default="", metadata={"description": "OpenAI-compatible endpoint for every model (optional)."})
    detector_mode: Literal["offline", "llm", "cascade"] = field(
        default="offline", metadata={"description": "offline policy, LLM, or LLM only when the offline policy is unsure."})
    embedding: str = field(default="minilm", metadata={"description": "minilm (bundled, offline) | openai:<model>."})
    retriever: Literal["bm25", "dense", "hybrid"] = field(default="hybrid", metadata={"description": "Workflow retriever."})
    fusion: Literal["rrf", "score"] = field(default="rrf", metadata={"description": "Hybrid fusion: reciprocal rank or normalised score."})
    strategy: Literal["flat", "D>W", "R>W", "D>R>W"] = field(default="flat", metadata={"description": "Hierarchical retrieval strategy."})
    representation: Literal["text", "code", "flowchart", "summary"] = field(
        default="text", metadata={"description": "Workflow representation that is indexed and searched."})
    top_k_upper: int = field(default=3, metadata={"description": "Domains/roles kept at the upper levels."})
    top_k: int = field(default=5, metadata={"description": "Workflows returned by the retriever."})
    # SGD train (reports/switch-sgd-train-fusion): score fusion 0.794 top-1 vs RRF 0.789; with the prior
    # 0.839 vs 0.813.  On the demo desk's compliance sessions RRF does better (offline success 0.945 vs
    # 0.930), so RRF stays the default.  The prior is off by default: it rewards staying in the services
    # already used (as SGD dialogues do) and can outvote a clear winner when a user digresses across domains.
    context_prior: bool = field(default=False, metadata={
        "description": "Re-rank search results with the conversation's context (active role, roles used before). "
                       "Tuned on BM25/dense/score-fused scores; RRF's compressed scores let the prior dominate."})
    clarify_margin: float = field(default=0.0, metadata={
        "description": "Ask a clarifying question when the top-2 fused scores differ by less than this (0 = never)."})
    max_attempts: int = field(default=3, metadata={"description": "Rejected proposals per turn before a safe reply."})
    max_api_repeats: int = field(default=3, metadata={"description": "Identical API calls allowed per workflow instance."})
    max_turns: int = field(default=40, metadata={"description": "Session length limit (user turns)."})
    tool_timeout: float = field(default=10.0, metadata={"description": "Seconds a tool call may take."})
    confirm_irreversible: bool = field(default=True, metadata={
        "description": "Ask the user (LangGraph interrupt) before an irreversible tool runs."})
    experience: bool = field(default=False, metadata={"description": "Inject WISE-Flow experience guidance when a store exists."})
    disabled_checks: str = field(default="", metadata={
        "description": "Post-decision checks switched off, comma-separated names (evaluations' ablations; 'all' = every check)."})

    @property
    def disabled_check_names(self) -> frozenset[str]:
        from dialogue.control.checks import CHECKS

        names = {n.strip() for n in self.disabled_checks.split(",") if n.strip()}
        return frozenset(CHECKS) if "all" in names else frozenset(names)

    def __post_init__(self) -> None:
        # Environment overrides only fields left at their class default.
        for f in fields(self):
            if getattr(self, f.name) == f.default:
                setattr(self, f.name, _env(f.name, f.default))
