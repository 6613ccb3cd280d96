"""Enum options said in other words (``dialogue.understanding.enums``), with the real offline embedding
model: read only as the answer to the question for the slot, never from a question, "I don't know", a bare
"hmm" or a message that was not asked for it."""

from __future__ import annotations

import pytest

from dialogue.understanding.enums import is_answer, nearest, option_text, read_answer, readable
from dialogue.understanding.slots import fill_slots
from memory.embeddings import get_embedder
from workflows.pdl import Workflow

REASONS = ["does_not_fit", "faulty", "wrong_item", "not_as_described", "no_longer_needed"]


@pytest.fixture(scope="module")
def embed():
    return get_embedder("minilm").embed


def test_option_words_and_the_options_an_answer_can_mean():
    assert option_text("does_not_fit") == "does not fit" and option_text("Full-size") == "Full size"
    assert readable(["dontcare", "True", "False", "2", "Music", "Sports"]) == ["Music", "Sports"]


@pytest.mark.parametrize("text,options,expected", [
    ("they're too small", REASONS, "does_not_fit"),
    ("I just don't need it anymore", REASONS, "no_longer_needed"),
    ("it arrived smashed to pieces", ["item_returned", "damaged_on_arrival", "never_arrived", "charged_twice"],
     "damaged_on_arrival"),
    ("I want to see a concert", ["Music", "Sports"], "Music"),
])
def test_an_answer_in_other_words_names_the_nearest_option(embed, text, options, expected):
    assert read_answer(text, options, embed) == expected


@pytest.mark.parametrize("text", ["hmm", "well", "what are my options?", "I don't know", "no idea", "ok"])
def test_no_answer_names_nothing(embed, text):
    assert not is_answer(text) and read_answer(text, REASONS, embed) is None


def test_nothing_without_embeddings_or_a_choice(embed):
    assert read_answer("they're too small", REASONS, None) is None
    assert read_answer("sure thing", ["true", "false"], embed) is None and nearest("x", ["a"], embed) is None


def test_the_slot_reader_takes_it_only_for_the_asked_slot(embed):
    wf = Workflow.model_validate({
        "name": "return_item", "description": "Return an item", "domain": "retail", "role": "returns",
        "slots": [{"name": "item", "type": "string", "description": "Which item goes back"},
                  {"name": "reason", "type": "enum", "enum": REASONS, "description": "Why the item is returned"}],
        "procedure": "def return_item():\n    ask(['item', 'reason'])\n"})
    def read(text, pending, embed=embed, missing=("item", "reason")):
        return fill_slots(text, wf, pending=pending, missing=list(missing), embed=embed).values

    assert read("they're too small", ["reason"]) == {"reason": "does_not_fit"}
    assert "reason" not in read("they're too small", ["item"])  # not asked
    assert "reason" not in read("they're too small", ["reason"], embed=None)  # no embeddings
    assert "reason" not in read("they're too small", ["reason"], missing=["item"])  # it has a value: no change
    # two questions open: the words may answer the other one, so the option is not guessed
    assert "reason" not in read("the red one, too small", ["item", "reason"])
