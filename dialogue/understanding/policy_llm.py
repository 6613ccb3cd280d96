"""The LLM switch-detector policy and the cascade: the FlowSwitch prompt with structured output
``{action, search_query, user_intention}`` (``with_structured_output`` when the model supports it,
else JSON parsed from text), up to ``LLM_RETRIES`` retries on malformed output, then the offline
verdict.  ``cascade`` asks the LLM only when the offline confidence is below ``CASCADE_THRESHOLD``."""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from pydantic import ValidationError

from workflows.text import message_text

from .policy_offline import DEFAULT_PARAMS, Params, ScoreFn, Verdict, offline_decide
from .prompts import SwitchDecision, llm_prompt

CASCADE_THRESHOLD = 0.7
LLM_RETRIES = 2



def parse_decision(text: str) -> SwitchDecision:
    """The first JSON object in the text, validated; raises ValueError when malformed."""
    start = text.find("{")
    while start != -1:
        depth = 0
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                try:
                    return SwitchDecision.model_validate(json.loads(text[start:i + 1]))
                except (json.JSONDecodeError, ValidationError):
                    break
        start = text.find("{", start + 1)
    raise ValueError(f"no valid decision JSON in model output: {text[:200]!r}")


def _structured(model):
    try:
        return model.with_structured_output(SwitchDecision)
    except (NotImplementedError, AttributeError, TypeError, ValueError):
        return None  # fake/simple chat models: parse JSON from text instead


def llm_decide(model, messages: Sequence[Any], workflow, fallback: Callable[[], Verdict],
               retries: int = LLM_RETRIES) -> Verdict:
    prompt = llm_prompt(messages, workflow)
    runner = _structured(model)
    errors: list[str] = []
    for _ in range(retries + 1):
        try:
            if runner is not None:
                out = runner.invoke(prompt)
                decision = out if isinstance(out, SwitchDecision) else SwitchDecision.model_validate(out)
            else:
                decision = parse_decision(message_text(model.invoke(prompt)))
        except Exception as exc:  # malformed output or a transport error: retry, then fall back
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
            continue
        query = decision.search_query.strip()
        if decision.action == "SEARCH" and not query:
            query = fallback().search_query or decision.user_intention
        return Verdict(decision.action, False, 1.0, query, decision.user_intention, "llm",
                       {"llm_attempts": float(len(errors) + 1)})
    v = fallback()
    v.policy = "offline-fallback"
    v.features = {**v.features, "llm_attempts": float(len(errors))}
    v.user_intention = v.user_intention or "; ".join(errors)
    return v


def decide(messages: Sequence[Any], active: str | None, workflow=None, score: ScoreFn | None = None,
           pending: str | None = None, mode: str = "offline", model=None,
           params: Params = DEFAULT_PARAMS, cascade_threshold: float = CASCADE_THRESHOLD,
           roles: dict[str, str] | None = None, finished: bool = False, filled: dict | None = None) -> Verdict:
    """One detector verdict under a policy (``offline`` | ``llm`` | ``cascade``)."""
    offline = offline_decide(messages, active, workflow, score, pending, params, roles, finished, filled)
    if model is None or mode == "offline":
        return offline
    if mode == "cascade" and offline.confidence >= cascade_threshold:
        offline.policy = "cascade-offline"
        return offline
    v = llm_decide(model, messages, workflow, lambda: offline)
    if mode == "cascade" and v.policy == "llm":
        v.policy = "cascade-llm"
    return v


