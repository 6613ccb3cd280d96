"""The graph ``langgraph dev`` / Studio serves (``langgraph.json`` → ``./graph/studio.py:graph``).

Compiled without a checkpointer: the LangGraph server brings its own persistence (threads,
interrupts, resume; ``flowdesk serve`` makes it our durable checkpointer).  Runtime settings come
from Studio's configuration panel or the SDK's ``context`` over the ``FLOWDESK_*`` environment; a
client's ``context`` is validated and cannot change server-side settings (library, stores,
database paths, URLs) unless the operator allows it (``graph.context.ClientContext``,
``FLOWDESK_CLIENT_SETTINGS``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

for _k, _v in (("ANONYMIZED_TELEMETRY", "False"), ("ORT_DISABLE_TELEMETRY", "1"), ("HF_HUB_OFFLINE", "1"),
               ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(_k, _v)

# The server imports this file by path; make the project's packages importable either way.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from graph.agent import build_agent  # noqa: E402
from graph.context import ClientContext  # noqa: E402

graph = build_agent(served=True)  # the ledger beside the server's checkpoints (FLOWDESK_CHECKPOINT_URL)
# LangGraph builds the run's context as ``context_schema(**client_mapping)``: with ClientContext that
# construction applies the client rules (validated values, server-side settings refused).
graph.context_schema = ClientContext
