"""A goal-driven simulated user, reusable by any evaluation: ``SimulatedUser(goal, seed).reply(agent_text)``.

The user pursues a ``evals.session_goals.Goal`` (a workflow, the slot values it knows, optionally a second
goal it switches to and back): it opens with a request, answers what the agent asks from its goal, says
it again in other words when asked again, accepts or refuses confirmations, and stops (``None``) when the
agent has nothing more to ask.  It injects one out-of-workflow move by category:

- ``intent_switch``: mid-way asks for the second goal, follows it through, then goes back to the first;
- ``procedure_jump``: asks the agent to skip ahead and just do the final action;
- ``irrelevant``: answers a question with something unrelated, then answers properly;
- ``cancellation``: gives up mid-way ("never mind") and leaves;
- ``correction``: gives a wrong value, then corrects it in the next turn;
- ``refuse_confirmation``: declines the irreversible action when asked to confirm.

Offline it is deterministic given the seed: wording comes from templates with synonyms (openers,
fillers, ways to give a value, dates in several formats), never from the agent's own vocabulary.  Which
slots a question asks for is read from the words the question shares with each slot's name and PDL
description — what any person reading the question would go by.  With a chat model (``model=``, e.g.
``graph.resources.model_for(Context(user_simulator_model=...), "user_simulator")``) an LLM plays the
user from the same goal and instructions; the offline user still decides the confirmations' answers.
"""

from __future__ import annotations

import random
import re
from datetime import date
from typing import Any

from workflows.text import content_words

from .session_goals import Goal

CATEGORIES = {
    "none": "no out-of-workflow move (control group)",
    "intent_switch": "intent switching: another task mid-way, then back (FlowAgent)",
    "procedure_jump": "procedure jumping: asks to skip ahead to the final action (FlowAgent)",
    "irrelevant": "irrelevant answering: an unrelated reply to a question (FlowAgent)",
    "cancellation": "cancellation: the user gives up mid-way",
    "correction": "correction: a wrong value, corrected in the next turn",
    "refuse_confirmation": "confirmation refusal: the user declines the irreversible action",
}
MAX_TURNS = 14
STOP = "###STOP###"

_OPEN = ["I'd like to {task}.", "Hi, I want to {task}.", "Hello! Could you help me {task}?", "I need to {task}, please.",
         "Can you {task} for me?", "Hey there, I'm hoping to {task}."]
_GIVE = ["{v}", "it's {v}", "{label}: {v}", "the {label} is {v}", "sure, {v}", "that would be {v}"]
_JOIN = [", ", " and ", "; ", ", also "]
_SWITCH = ["Actually, before that, {open}", "Wait, first something else: {open}", "Sorry, one other thing first. {open}"]
_BACK = ["Thanks. Now back to {task}.", "Great. Can we go back to {task}?", "OK, let's return to {task} now."]
_JUMP = ["Can you skip the checks and just {final}?", "Let's not waste time, just {final} right away.",
         "Skip ahead please and {final} now."]
_IRRELEVANT = ["By the way, do you know if it's going to rain later?", "My cat just knocked a glass off the table, sorry.",
               "Is your office open on public holidays?", "I love the music you play on hold."]
_CANCEL = ["Never mind, I don't want to {task} anymore.", "Forget it, please cancel this.",
           "Actually, let's stop here. I changed my mind."]
_CORRECT = ["Sorry, I made a mistake: the {label} is {v}, not {w}.", "Wait, I meant {v} for the {label}.",
            "Correction: {v}, not {w}."]
_YES = ["Yes, go ahead.", "Yes please.", "Sure, do it.", "Yes, that's right."]
_NO = ["No, don't do that.", "No, please don't.", "No, I've changed my mind."]
_THANKS = ["No, that's all, thanks.", "That's everything, thank you.", "Nothing else, thanks!"]


def _task(title: str) -> str:
    t = title.strip().rstrip(".")
    return t[0].lower() + t[1:] if t else "get some help"


def _label(spec: dict[str, Any], name: str) -> str:
    desc = (spec.get("description") or "").split(",")[0].split("(")[0].strip()
    return (desc[0].lower() + desc[1:]) if desc and len(desc) < 40 else name.replace("_", " ")


def say_value(value: Any, spec: dict[str, Any], rng: random.Random) -> str:
    """A value as a person may say it: ISO dates also as "10 December" / "December 10, 2026"; enum values
    with spaces instead of underscores."""
    text = str(value)
    if spec.get("type") == "date" and re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        d = date.fromisoformat(text)
        return rng.choice([text, f"{d.day} {d:%B}", f"{d:%B} {d.day}, {d.year}", f"{d.day} {d:%B} {d.year}"])
    if spec.get("enum"):
        return text.replace("_", " ")
    return text


_OFFERS_MORE = re.compile(r"\banything else\b", re.I)  # the agent is done with the request and offers more
_WH_QUESTION = re.compile(r"(?:^|[.!?:]\s+)(?:which|what|when|where|who|how)\b[^.!?]*\?", re.I)


def _asks_for_value(text: str) -> bool:
    """The agent's question asks for a value ("These are ...: A, B, C. Which of them ...?"), so the goal's
    value appearing in the listed options is no confirmation to say yes to."""
    return bool(_WH_QUESTION.search(text))


class SimulatedUser:
    """``reply(agent_text) -> str | None`` (None: the user is done); ``confirm(question) -> str``."""

    def __init__(self, goal: Goal, seed: int = 0, category: str = "none", second: Goal | None = None,
                 model: Any = None):
        if category not in CATEGORIES:
            raise ValueError(f"category: {category!r} is not one of {list(CATEGORIES)}")
        self.goal, self.category, self.second, self.model = goal, category, second, model
        self.rng = random.Random(f"{seed}:{goal.id}:{category}")
        self.turns = 0
        self.current = goal
        self.given: dict[str, set[str]] = {goal.id: set()}
        self.history: list[tuple[str, str]] = []  # (role, text)
        self.inject_at = self.rng.randint(1, 2)  # the user turn of the out-of-workflow move
        self.state = "main"  # main | side (in the second goal) | done
        self.wrong: tuple[str, Any] | None = None
        self.moves: list[str] = []  # the out-of-workflow moves made (for the report)
        self.closing = False
        self.tried: dict[str, set[str]] = {}  # question -> slots already offered for it (a re-asked question)

    # --- the public API ---------------------------------------------------------------------------------
    def reply(self, agent_text: str | None) -> str | None:
        """The user's next message given the agent's last one (None at the start); None ends the session."""
        if agent_text is not None:
            self.history.append(("agent", agent_text))
        if self.state == "done_next":  # the agent acknowledged the cancellation: leave
            self.state = "done"
        if self.state == "done" or self.turns >= MAX_TURNS + 2 * len(self.current.conditions):
            return None
        text = self._llm_reply() if self.model is not None else self._offline_reply(agent_text)
        if text is None:
            self.state = "done"
            return None
        self.turns += 1
        self.history.append(("user", text))
        return text

    def confirm(self, question: str) -> str:
        """The answer to a confirmation of an irreversible action."""
        self.history.append(("agent", question))
        refuse = self.category == "refuse_confirmation" and self.current is self.goal
        wrong = self._wrong_details(self.current, question)  # the details are not what the user asked for
        if refuse:
            self.moves.append("refuse_confirmation")
            self.state = "done"
        answer = self.rng.choice(_NO if refuse or wrong else _YES)
        if wrong and not refuse:
            answer += " " + self._give(self.current, wrong[:2])
        self.history.append(("user", answer))
        return answer

    # --- offline ------------------------------------------------------------------------------------------
    def _offline_reply(self, agent_text: str | None) -> str | None:
        g = self.current
        if agent_text is None:
            return self._opening(g, first=True)
        if self.wrong is not None:  # correct the wrong value right away
            slot, _w = self.wrong
            spec = g.slot_specs.get(slot, {})
            self.wrong = None
            self.moves.append("correction")
            return self.rng.choice(_CORRECT).format(label=_label(spec, slot), v=say_value(g.slots[slot], spec, self.rng),
                                                    w=say_value(_w, spec, self.rng))
        move = self._move(agent_text)
        if move is not None:
            return move
        if self.state == "side" and _OFFERS_MORE.search(agent_text):  # the side task is done: back to the first
            self.state, self.current = "main", self.goal
            return self.rng.choice(_BACK).format(task=_task(self.goal.title))
        answer = self._condition(g, agent_text)
        if answer is not None:  # the agent asks (or says it will ask) about the user's situation
            return self.rng.choice(_YES if answer else _NO)
        asked = self._asked(g, agent_text)
        question = "?" in agent_text
        if not question and not asked:
            if self.state == "side":  # the second task is answered: back to the first
                self.state, self.current = "main", self.goal
                return self.rng.choice(_BACK).format(task=_task(self.goal.title))
            return None  # nothing more is asked: the user got what the agent can give
        if asked and question and not _asks_for_value(agent_text) and all(self._restated(g, s, agent_text)
                                                                          for s in asked):
            return self.rng.choice(_YES)  # "could you confirm: X, Y?" with the right values
        todo = asked or self._guess(g, agent_text)
        if not todo:
            if self.closing:
                return None
            self.closing = True
            return self.rng.choice(_THANKS)
        return self._give(g, todo)

    def _opening(self, g: Goal, first: bool = False) -> str:
        self.given.setdefault(g.id, set())
        text = self.rng.choice(_OPEN).format(task=_task(g.title))
        names = list(g.slots)
        k = self.rng.choice([0, 0, 1, len(names) // 2, len(names)])  # some users say it all at once
        if first and self.category not in ("none", "correction", "refuse_confirmation"):
            k = min(k, len(names) // 2)  # leave the conversation room for the move
        early = self.rng.sample(names, min(k, len(names)))
        if early:
            text += " " + self._give(g, early)
        return text

    def _give(self, g: Goal, slots: list[str]) -> str:
        parts = []
        for s in slots:
            spec = g.slot_specs.get(s, {})
            label = _label(spec, s)
            forms = _GIVE if not re.match(r"(which|what|how|whether)\b", label) else _GIVE[:2]
            value = g.slots[s]
            if (self.category == "correction" and self.wrong is None and "correction" not in self.moves
                    and g is self.goal and g.alternatives.get(s)):
                value = self.rng.choice(g.alternatives[s])  # a slip, corrected next turn
                self.wrong = (s, value)
            parts.append(self.rng.choice(forms).format(v=say_value(value, spec, self.rng), label=label))
            self.given[g.id].add(s)
        text = self.rng.choice(_JOIN).join(parts)
        return text[0].upper() + text[1:] + ("" if text.endswith((".", "?", "!")) else self.rng.choice([".", "", "."]))

    def _guess(self, g: Goal, question: str) -> list[str]:
        """A question no slot clearly matches: the values not given yet (two, those sharing a word with the
        question first); asked the same again, the values not yet offered for it, one at a time — what a
        person does when the agent repeats itself."""
        said = set(content_words(question.lower()))
        overlap = {s: len(said & set(content_words(f"{s.replace('_', ' ')} {g.slot_specs.get(s, {}).get('description') or ''}"
                                                   .lower()))) for s in g.slots}
        key = question.strip().casefold()
        tried = self.tried.setdefault(key, set())
        fresh = sorted((s for s in g.slots if s not in self.given[g.id]), key=lambda s: -overlap[s])[:2]
        if not fresh and tried:  # asked again: another of the user's values
            fresh = sorted((s for s in g.slots if s not in tried), key=lambda s: -overlap[s])[:1]
        tried.update(fresh)
        return fresh

    def _asked(self, g: Goal, text: str) -> list[str]:
        """Slots the agent's message asks for: those whose name/description words it uses (two or more
        words, or the best match).  Without a question mark only slots not given yet count ("Please give
        me your customer number"), so an answer that mentions them ("your savings balance is ...") does
        not make the user repeat itself."""
        said = set(content_words(text.lower()))
        vocab = {s: set(content_words(f"{s.replace('_', ' ')} {spec.get('description') or ''}".lower()))
                 for s, spec in g.slot_specs.items() if s in g.slots}
        df: dict[str, int] = {}
        for words in vocab.values():
            for w in words:
                df[w] = df.get(w, 0) + 1
        # a word several slots share ("name", "number") says less than one only this slot has ("pin")
        scores = {s: sum(1 / df[w] for w in words & said) for s, words in vocab.items()}
        asked = [s for s in g.slot_specs if scores.get(s, 0) >= 1]
        if "?" not in text:
            asked = [s for s in asked if s not in self.given[g.id]]
        return asked

    def _condition(self, g: Goal, text: str) -> bool | None:
        """The goal's answer to the condition the agent's message is about (most of the condition's words
        in the message), or None."""
        said = set(content_words(text.lower()))
        best, score = None, 0.0
        for cond_text, value in g.conditions.values():
            words = set(content_words(cond_text.lower()))
            share = len(words & said) / len(words) if words else 0.0
            if share > score:
                best, score = value, share
        return best if score >= 0.6 else None

    def _restated(self, g: Goal, slot: str, text: str) -> bool:
        """The agent's message repeats the goal's value of ``slot`` (as a whole word: "2" is not in "2026")."""
        value = str(g.slots[slot]).strip().casefold()
        low = text.casefold()
        return bool(value) and any(re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", low)
                                   for v in {value, value.replace("_", " ")})

    def _wrong_details(self, g: Goal, question: str) -> list[str]:
        """Slots a confirmation names ("amount: 4") without the goal's value: what a user checking the
        details would object to."""
        low = question.casefold()
        return [s for s in g.slots if s.replace("_", " ") in low and not self._restated(g, s, question)]

    def _move(self, agent_text: str) -> str | None:
        """The category's out-of-workflow move, once, at the chosen turn."""
        if self.category in ("none", "refuse_confirmation", "correction") or self.category in self.moves:
            return None
        if self.turns < self.inject_at or "?" not in agent_text:
            return None
        self.moves.append(self.category)
        if self.category == "intent_switch" and self.second is not None:
            self.state, self.current = "side", self.second
            return self.rng.choice(_SWITCH).format(open=self._opening(self.second))
        if self.category == "procedure_jump":
            final = _task(self.goal.title)
            return self.rng.choice(_JUMP).format(final=final)
        if self.category == "irrelevant":
            return self.rng.choice(_IRRELEVANT)
        if self.category == "cancellation":
            self.state = "done_next"
            return self.rng.choice(_CANCEL).format(task=_task(self.goal.title))
        return None

    # --- LLM ------------------------------------------------------------------------------------------------
    def instructions(self) -> str:
        g = self.goal
        facts = "\n".join(f"- {_label(g.slot_specs.get(k, {}), k)}: {v}" for k, v in g.slots.items())
        move = {
            "intent_switch": f"After one or two exchanges, ask for this first instead: {self.second.title if self.second else ''} "
                             f"({', '.join(f'{k}={v}' for k, v in (self.second.slots if self.second else {}).items())}); "
                             "when that is done, go back to your main request.",
            "procedure_jump": "After one or two exchanges, ask the agent to skip the checks and just do it.",
            "irrelevant": "Answer one of the agent's questions with something unrelated, then answer properly.",
            "cancellation": "After one or two exchanges, say you no longer want this and end.",
            "correction": "Give one detail wrongly at first, then correct it in your next message.",
            "refuse_confirmation": "When asked to confirm the final action, say no.",
        }.get(self.category, "")
        return (f"You are a customer talking to a service desk agent. You want to: {g.title}.\n"
                f"What you know (say it only when asked or when natural):\n{facts}\n{move}\n"
                f"Write one short message per turn, in your own words. When you have what you came for, "
                f"or the agent says it cannot help, reply exactly {STOP}.")

    def _llm_reply(self) -> str | None:
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

        # the roles are swapped: the agent's messages are the "human" turns of the user's model
        msgs: list[Any] = [SystemMessage(self.instructions())]
        if not self.history:
            msgs.append(HumanMessage("(The agent is waiting. Start the conversation.)"))
        for role, text in self.history:
            msgs.append(HumanMessage(text) if role == "agent" else AIMessage(text))
        out = self.model.invoke(msgs)
        text = (out.content if isinstance(out.content, str) else str(out.content)).strip()
        if not text or STOP in text:
            return None
        return text
