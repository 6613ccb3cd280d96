"""FlowSwitch query inputs built from the conversation: Full, Last3, Last2, Last1, SelfGen.

``LastN`` keeps the last N user turns and every agent turn after the first of them; ``Full`` is
the whole history; ``SelfGen`` is the detector's self-generated query (falls back to Last1 when the
detector wrote none).  Messages are LangChain messages; tool messages are left out.
"""

from __future__ import annotations

from typing import Any, Sequence

QUERY_KINDS = ("Full", "Last3", "Last2", "Last1", "SelfGen")


def _role(msg: Any) -> str | None:
    kind = getattr(msg, "type", None) or (msg.get("role") if isinstance(msg, dict) else None)
    if kind in ("human", "user"):
        return "User"
    if kind in ("ai", "assistant"):
        return "Agent"
    return None  # system / tool messages are not part of the query


def _text(msg: Any) -> str:
    content = getattr(msg, "content", None)
    if content is None and isinstance(msg, dict):
        content = msg.get("content", "")
    if isinstance(content, list):  # content blocks
        content = " ".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return str(content or "").strip()


def _lines(messages: Sequence[Any]) -> list[tuple[str, str]]:
    return [(r, t) for m in messages if (r := _role(m)) and (t := _text(m))]


def build_query(kind: str, messages: Sequence[Any], self_gen: str | None = None) -> str:
    lines = _lines(messages)
    if kind == "SelfGen":
        if self_gen and self_gen.strip():
            return self_gen.strip()
        kind = "Last1"
    if kind == "Full":
        keep = lines
    elif kind in ("Last1", "Last2", "Last3"):
        n = int(kind[-1])
        user_idx = [i for i, (r, _) in enumerate(lines) if r == "User"]
        keep = lines[user_idx[-min(n, len(user_idx))]:] if user_idx else lines[-1:]  # fewer turns: all
    else:
        raise ValueError(f"query kind {kind!r} is not one of {', '.join(QUERY_KINDS)}")
    return "\n".join(f"{r}: {t}" for r, t in keep)
