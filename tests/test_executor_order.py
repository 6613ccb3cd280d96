"""The questions' order (``policy_learned.pending_collection``): while the rules ask for a value, a gated
ranker may ask instead for any other value the procedure collects for the same pending call, never a
value of a later call, never a question asked before, and never the call itself."""

from __future__ import annotations

from dialogue.execution.interpreter import Interpreter
from dialogue.execution.policy_learned import (Candidate, LearnedPolicy, _leaves_collection, _View, asked_slots,
                                               load_policy, pending_collection, view_of)
from workflows.pdl import Workflow

BOOK = Workflow.model_validate({
    "name": "book_table", "description": "Book a table.", "domain": "dining", "role": "host",
    "slots": [{"name": s, "description": s, "type": "string"} for s in ("guest", "party", "time", "note")],
    "apis": [{"name": "book", "description": "Book.", "returns": ["ref"],
              "parameters": {"type": "object", "properties": {s: {"type": "string"} for s in ("guest", "party", "time")},
                             "required": ["guest", "party", "time"]}},
             {"name": "annotate", "description": "Add a note.",
              "parameters": {"type": "object", "properties": {"note": {"type": "string"}, "ref": {"type": "string"}},
                             "required": ["note", "ref"]}, "precondition": ["book"]}],
    "answers": [{"name": "ask_guest", "template": "Your name?"}, {"name": "ask_party", "template": "How many?"},
                {"name": "ask_time", "template": "What time?"}, {"name": "ask_note", "template": "Any note?"},
                {"name": "done", "template": "Booked.", "precondition": ["book"]}],
    "procedure": "[guest] = ANSWER.ask_guest()\n[party] = ANSWER.ask_party()\n[time] = ANSWER.ask_time()\n"
                 "[ref] = API.book(guest, party, time)\n[note] = ANSWER.ask_note()\nAPI.annotate(note, ref)\n"
                 "ANSWER.done()\n",
})


def _view() -> _View:
    return view_of(BOOK, Interpreter(BOOK))


def test_the_pending_collection_is_what_the_procedure_collects_for_the_same_call():
    view = _view()
    assert pending_collection(view, {"guest"}, {}) == {"guest", "party", "time"}
    # a value given is no longer collected; the asked one stays whatever the frame says
    assert pending_collection(view, {"guest"}, {"party": "4", "time": ""}) == {"guest", "time"}
    # a later call's value: only itself (its call also takes a result, which no question collects)
    assert pending_collection(view, {"note"}, {}) == {"note"}
    # values no call takes together: nothing wider than what the rules ask
    assert pending_collection(view, {"guest", "note"}, {}) == {"guest", "note"}
    assert pending_collection(view, set(), {}) == set()


def test_a_question_of_the_same_call_is_allowed_a_later_one_and_the_call_are_not():
    view = _view()
    collecting = set(asked_slots({"kind": "reply", "name": "ask_guest"}, view, {}))
    assert collecting == {"guest"}
    askable = pending_collection(view, collecting, {})
    ask = lambda name, miss: Candidate("answer", name, missing=miss)  # noqa: E731
    assert not _leaves_collection(ask("ask_time", ["time"]), view, [], collecting, askable)
    assert _leaves_collection(ask("ask_time", ["time"]), view, [], collecting)  # the rules' order alone
    assert _leaves_collection(ask("ask_note", ["note"]), view, [], collecting, askable)
    assert _leaves_collection(ask("ask_party", ["party"]), view, ["ask_party"], collecting, askable)  # asked before
    assert not _leaves_collection(Candidate("request", "request_information", missing=["party"]), view, [],
                                  collecting, askable)
    assert _leaves_collection(Candidate("request", "request_information", missing=["note"]), view, [],
                              collecting, askable)
    book = Candidate("api", "book", missing=["guest", "party", "time"])
    assert _leaves_collection(book, view, [], collecting, askable)  # no call before its values


def test_the_order_is_the_gates_on_in_the_bundled_model_off_in_older_files(tmp_path):
    """``Gate.order`` (on in the bundled model and in files trained since session 17, off in older files) is what
    widens the collection; a model file without it is off, and a copy without a gate never has it."""
    from evals.train_executor import GATE_ORDER

    base = load_policy("auto")
    assert isinstance(base, LearnedPolicy) and base.model.gate is not None and base.order and GATE_ORDER
    off = base.model.model_copy(update={"gate": base.model.gate.model_copy(update={"order": False})})
    raw = LearnedPolicy(off, "off").save(tmp_path / "older.json")
    raw.write_text(raw.read_text().replace(',"order":false', ""))  # a file written before Gate.order
    assert not load_policy(f"learned:{raw}").order
    on = base.model
    path = LearnedPolicy(on, "on").save(tmp_path / "order.json")
    assert load_policy(f"learned:{path}").order
    assert not LearnedPolicy(on, "on").ungated().order
