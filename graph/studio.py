"""The graph ``langgraph dev`` / Studio serves (``langgraph.json`` → ``./graph/studio.py:graph``).

Compiled without a checkpointer: the LangGraph server brings its own persistence (threads,
interrupts, resume).  Runtime settings come from Studio's configuration panel (``context``) or
the ``FLOWDESK_*`` environment.
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

graph = build_agent()
