"""Bad input and bad configuration fail clearly (naming the field or path) and leave the thread usable."""

from __future__ import annotations

import dataclasses

import pytest

from graph.agent import MAX_MESSAGE_CHARS, AgentConfigError, AgentInputError, check_context
from graph.context import Context


def test_check_context_names_the_field(tmp_path):
    with pytest.raises(AgentConfigError, match="executor_model.*provider:model"):
        check_context(Context(executor_model="gpt4"))
    with pytest.raises(AgentConfigError, match="detector_model.*no chat model registered"):
        check_context(Context(detector_model="registered:nobody"))
    missing = tmp_path / "no-such-library"
    with pytest.raises(AgentConfigError, match=f"library: directory '{missing}' does not exist"):
        check_context(Context(library=str(missing)))
    with pytest.raises(AgentConfigError, match="retriever: 'tfidf' is not one of"):
        check_context(Context(retriever="tfidf"))
    check_context(Context())  # the defaults are valid


def test_build_agent_refuses_bad_config(tmp_path):
    from conftest import require_agent

    require_agent()
    from graph.agent import build_agent

    with pytest.raises(AgentConfigError, match="library"):
        build_agent(Context(library=str(tmp_path / "missing")))


def _thread_still_works(talk, thread):
    r = talk("I'd like to book a table", thread=thread)
    assert r.reply and r.active_workflow


@pytest.mark.parametrize("text, match", [
    ("", "messages\\[-1\\].content: the user message is empty"),
    ("   \n ", "the user message is empty"),
    ("x" * 200_000, f"200000 characters is over the limit of {MAX_MESSAGE_CHARS}"),
])
def test_bad_messages_fail_clearly_and_thread_survives(talk, text, match):
    with pytest.raises(AgentInputError, match=match):
        talk(text, thread="bad-msg")
    _thread_still_works(talk, "bad-msg")


def test_unknown_thread_starts_fresh(agent):
    cfg = {"configurable": {"thread_id": "never-seen-before"}}
    snap = agent.get_state(cfg)
    assert snap.values == {} and snap.next == ()


def test_bad_run_context_names_the_field_and_thread_survives(agent, agent_context, talk):
    from langchain_core.messages import HumanMessage

    cfg = {"configurable": {"thread_id": "bad-ctx"}}
    for bad, match in ((dataclasses.replace(agent_context, detector_model="nonsense"), "detector_model"),
                       (dataclasses.replace(agent_context, library="/no/such/dir"), "library: directory '/no/such/dir'")):
        with pytest.raises(AgentConfigError, match=match):
            agent.invoke({"messages": [HumanMessage("hello")]}, cfg, context=bad)
    _thread_still_works(talk, "bad-ctx")


def test_chat_cli_reports_bad_config_and_exits_2(tmp_path):
    import io

    from rich.console import Console

    from graph.chat import chat

    for kwargs, match in (({"library": str(tmp_path / "nolib")}, f"library: directory '{tmp_path / 'nolib'}'"),
                          ({"checkpoint": "mysql://db/x"}, "use a file path or a postgres:// URL")):
        out = io.StringIO()
        with pytest.raises(SystemExit) as exc:
            chat(console=Console(file=out, width=200, color_system=None), **kwargs)
        assert exc.value.code == 2 and match in out.getvalue()
