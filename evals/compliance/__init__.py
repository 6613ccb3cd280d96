"""``flowdesk eval compliance``: scripted adversarial sessions through the real agent graph.

Scripts live in ``evals/compliance_scripts/*.yaml`` as parametrised templates (user turns, the
scripted goal, answers to confirmations, expectations); each parameter row is one session.  Every
session runs through ``graph.agent.build_agent`` with the demo library and a fresh copy of the demo
database, under three policies:

- ``offline``: the offline PDL executor with the controllers on;
- ``scripted``: a registered chat model as the LLM executor that deliberately proposes invalid
  actions (booking before checking, announcing success without the API, repeating calls, bad or
  stale arguments), controllers on;
- ``scripted-nocontrol``: the same adversary with every post-decision check switched off — the
  ablation that shows what the controllers stop.

An independent oracle replays each session's trace and the database (it does not call the
controllers) to count invalid actions that reached a tool or the user.  Task success is judged from
the database and the replies.  Output: report.md, metrics.json (headline under "summary"), a PNG.
"""

from __future__ import annotations

from .adversary import adversary_model
from .cli import compliance_command
from .oracle import oracle
from .runner import run_eval, run_session, summarise, write_report
from .scripts import ADVERSARY, ATTACKS, CATEGORIES, POLICIES, SCRIPTS_DIR, Script, load_scripts

__all__ = ["ADVERSARY", "ATTACKS", "CATEGORIES", "POLICIES", "SCRIPTS_DIR", "Script", "adversary_model",
           "compliance_command", "load_scripts", "oracle", "run_eval", "run_session", "summarise", "write_report"]
