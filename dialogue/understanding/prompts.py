"""The LLM detector's prompt (FlowSwitch) and its structured output."""

from __future__ import annotations

from typing import Any, Literal, Sequence

from pydantic import BaseModel, Field

from workflows.text import message_text, role_of

class SwitchDecision(BaseModel):
    """Structured output of the LLM detector (FlowSwitch)."""

    action: Literal["STAY", "SEARCH"]
    search_query: str = Field(default="", description="FlowSwitch self-generated query when action is SEARCH")
    user_intention: str = Field(default="", description="one line: what the user wants now")


PROMPT = """You are the workflow switch detector of a customer-service agent that follows workflows.
The agent is currently executing this workflow:
Name: {name}
Description: {description}

Recent conversation:
{history}

New user turn: {turn}

Decide whether the agent should STAY in the current workflow (the user answers a question, gives
requested information, or continues the same task) or SEARCH the workflow library for another
workflow (the user asks for something the current workflow does not handle, or there is no current
workflow). When you answer SEARCH, write a search query in exactly this format:
"Potential Name of the workflow: ..., Task description of the workflow: ..., the action you need to take to solve the task: ..."
Reply with JSON only: {{"action": "STAY" or "SEARCH", "search_query": "...", "user_intention": "..."}}"""


def llm_prompt(messages: Sequence[Any], workflow=None, history_turns: int = 6) -> str:
    items = [(role_of(m), message_text(m).strip()) for m in messages]
    items = [(r, t) for r, t in items if r in ("user", "agent") and t]
    turn = items[-1][1] if items and items[-1][0] == "user" else ""
    hist = items[:-1] if turn else items
    history = "\n".join(f"{'User' if r == 'user' else 'Agent'}: {t}" for r, t in hist[-history_turns:]) or "(none)"
    return PROMPT.format(name=getattr(workflow, "name", None) or "(no active workflow)",
                         description=getattr(workflow, "description", "") or "-", history=history, turn=turn)


