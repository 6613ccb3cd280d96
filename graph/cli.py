"""The ``flowdesk`` command line: one typer app assembling each package's commands."""

from __future__ import annotations

import os

for _k, _v in (("ANONYMIZED_TELEMETRY", "False"), ("ORT_DISABLE_TELEMETRY", "1"), ("HF_HUB_OFFLINE", "1"),
               ("TOKENIZERS_PARALLELISM", "false"), ("LANGGRAPH_CLI_NO_ANALYTICS", "1")):
    os.environ.setdefault(_k, _v)

import typer  # noqa: E402

from evals.cli import app as eval_app  # noqa: E402
from graph.index_cli import index_command  # noqa: E402
from workflows.cli import import_app, workflows_app  # noqa: E402

app = typer.Typer(help="flowdesk: a workflow agent that follows business workflows yet talks like people.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.add_typer(workflows_app, name="workflows")
app.add_typer(import_app, name="import")
app.add_typer(eval_app, name="eval")
app.command("index")(index_command)
from graph.extract import extract_command  # noqa: E402  (workflows from conversations)
app.command("extract")(extract_command)


@app.command("chat")
def chat_command(thread: str = typer.Option(None, "--thread", help="Conversation id; reuse it to resume."),
                 library: str = typer.Option(None, "--library", help="Workflow library directory (default: bundled)."),
                 trace: bool = typer.Option(False, "--trace", help="Show each turn's decision, candidates, verdicts, tools."),
                 checkpoint: str = typer.Option(None, "--checkpoint",
                                                help="SQLite file or postgres:// URL (default .flowdesk/checkpoints.sqlite).")) -> None:
    """Chat with the agent in the terminal; conversations persist per thread."""
    from graph.chat import chat

    chat(thread=thread, library=library, trace=trace, checkpoint=checkpoint)


@app.command("demo")
def demo_command(workdir: str = typer.Option(None, "--workdir", help="Where the demo keeps its stores (default .flowdesk/demo; 'tmp' for a temp dir)."),
                 stats: bool = typer.Option(False, "--stats", help="Print per-turn latency (p50/p95) and peak RSS."),
                 trace: bool = typer.Option(False, "--trace", help="Show each turn's decision, candidates, verdicts, tools.")) -> None:
    """Scripted offline conversation on the bundled library; exits non-zero if an expectation fails."""
    from graph.demo import run_demo

    raise typer.Exit(code=run_demo(workdir=workdir, stats=stats, trace=trace))


if __name__ == "__main__":
    app()
