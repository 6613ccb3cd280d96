"""The ``flowdesk`` command line: one typer app assembling each package's commands."""

from __future__ import annotations

import os

for _k, _v in (("ANONYMIZED_TELEMETRY", "False"), ("ORT_DISABLE_TELEMETRY", "1"), ("HF_HUB_OFFLINE", "1"),
               ("TOKENIZERS_PARALLELISM", "false"), ("LANGGRAPH_CLI_NO_ANALYTICS", "1")):
    os.environ.setdefault(_k, _v)

import typer  # noqa: E402

from evals.cli import app as eval_app  # noqa: E402
from memory.cli import index_command  # noqa: E402
from workflows.cli import import_app, workflows_app  # noqa: E402

app = typer.Typer(help="flowdesk: a workflow agent that follows business workflows yet talks like people.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.add_typer(workflows_app, name="workflows")
app.add_typer(import_app, name="import")
app.add_typer(eval_app, name="eval")
app.command("index")(index_command)

if __name__ == "__main__":
    app()
