"""The ``flowdesk`` command line: one typer app assembling each package's commands.

``main`` is the console entry point: every command's known errors (a broken library, a bad
setting, a busy port, a locked store, ...) are printed as their named, redacted message and exit
with code 2 — never a traceback.  An unexpected error is one redacted line and exit 1
(``FLOWDESK_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import os

for _k, _v in (("ANONYMIZED_TELEMETRY", "False"), ("ORT_DISABLE_TELEMETRY", "1"), ("HF_HUB_OFFLINE", "1"),
               ("TOKENIZERS_PARALLELISM", "false"), ("LANGGRAPH_CLI_NO_ANALYTICS", "1")):
    os.environ.setdefault(_k, _v)

import sys  # noqa: E402

import typer  # noqa: E402

from evals.cli import app as eval_app, train_app  # noqa: E402
from graph.index_cli import index_command  # noqa: E402
from workflows.cli import import_app, workflows_app  # noqa: E402

app = typer.Typer(help="flowdesk: a workflow agent that follows business workflows yet talks like people.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.add_typer(workflows_app, name="workflows")
app.add_typer(import_app, name="import")
app.add_typer(eval_app, name="eval")
app.add_typer(train_app, name="train")
app.command("index")(index_command)
from graph.extract import extract_command  # noqa: E402  (workflows from conversations)
app.command("extract")(extract_command)
from graph.induce import experience_app, induce_command, logs_app  # noqa: E402  (WISE-Flow experience)
app.command("induce")(induce_command)
app.add_typer(logs_app, name="logs")
app.add_typer(experience_app, name="experience")
from convtests.cli import test_command  # noqa: E402  (conversation tests)
app.command("test")(test_command)


@app.command("chat")
def chat_command(thread: str = typer.Option(None, "--thread", help="Conversation id; reuse it to resume."),
                 library: str = typer.Option(None, "--library", help="Workflow library directory (default: bundled)."),
                 trace: bool = typer.Option(False, "--trace", help="Show each turn's decision, candidates, verdicts, tools."),
                 checkpoint: str = typer.Option(None, "--checkpoint",
                                                help="SQLite file or postgres:// URL (default .flowdesk/checkpoints.sqlite).")) -> None:
    """Chat with the agent in the terminal; conversations persist per thread."""
    from graph.chat import chat

    chat(thread=thread, library=library, trace=trace, checkpoint=checkpoint)


@app.command("serve")
def serve_command(host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind (default: loopback only)."),
                  port: int = typer.Option(2034, "--port", help="TCP port; a busy port is an error, never moved."),
                  checkpoint: str = typer.Option(None, "--checkpoint",
                                                 help="SQLite file or postgres:// URL (default FLOWDESK_CHECKPOINT_URL, "
                                                      "else .flowdesk/checkpoints.sqlite)."),
                  config: str = typer.Option(None, "--config", help="langgraph.json (default: the project's).")) -> None:
    """Run the LangGraph API server (Studio, SDK) on the durable checkpointer; SIGTERM/Ctrl-C stop it."""
    from graph.serve import ROOT, serve

    raise typer.Exit(code=serve(host=host, port=port, checkpoint=checkpoint, config=config or ROOT / "langgraph.json",
                                echo=typer.echo))


@app.command("demo")
def demo_command(workdir: str = typer.Option(None, "--workdir", help="Where the demo keeps its stores (default .flowdesk/demo; 'tmp' for a temp dir)."),
                 stats: bool = typer.Option(False, "--stats", help="Print per-turn latency (p50/p95) and peak RSS."),
                 trace: bool = typer.Option(False, "--trace", help="Show each turn's decision, candidates, verdicts, tools.")) -> None:
    """Scripted offline conversation on the bundled library; exits non-zero if an expectation fails."""
    from graph.demo import run_demo

    raise typer.Exit(code=run_demo(workdir=workdir, stats=stats, trace=trace))


def main(argv: list[str] | None = None) -> None:
    from graph.errors import describe, named_errors
    from workflows.sanitize import redact

    try:
        app(args=argv, prog_name="flowdesk")
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the CLI's one place that turns errors into messages
        if isinstance(exc, named_errors()):
            typer.echo(f"flowdesk: {describe(exc)}", err=True)
            sys.exit(2)
        if os.environ.get("FLOWDESK_DEBUG"):
            raise
        typer.echo(f"flowdesk: unexpected error: {type(exc).__name__}: {redact(exc)} "
                   f"(FLOWDESK_DEBUG=1 shows the traceback)", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
