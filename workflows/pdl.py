"""The workflow file format: Pydantic models for PDL (extended) workflows, domains and roles.

One YAML file per workflow, laid out ``<domain>/<role>/<name>.yaml`` with ``_domain.yaml`` and
``_role.yaml`` describing the upper levels (see ``../shared/PDL.md``).  These models are the one
vocabulary shared by the loader, the renderers, the retriever, the executor and the controllers.
Semantic checks that span fields (preconditions, procedure, templates) live in ``validate.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

NAME_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"
# ``$slot`` or ``${slot}`` placeholders in ANSWER templates (string.Template syntax).
TEMPLATE_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")

SlotType = Literal["string", "integer", "number", "boolean", "date", "time", "datetime", "enum"]

# FlowAgent's two generic ANSWERs: every workflow has them without declaring them.
BUILTIN_ANSWERS = ("request_information", "answer_out_of_workflow_questions")
# Built-in condition for natural-language branch labels (e.g. compiled from flowcharts):
# ``if COND("the user is a member"):``; an LLM judges it, the offline executor asks or infers.
BUILTIN_CONDITION = "COND"
FORMATS = ("text", "code", "flowchart", "summary")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Slot(_Model):
    """A piece of information the workflow collects from the user."""

    name: str = Field(pattern=NAME_RE)
    title: str | None = None  # the source's own name when ``name`` had to be made an identifier ("from")
    description: str = ""
    type: SlotType = "string"
    enum: list[str] | None = None
    required: bool = True

    @property
    def display_name(self) -> str:
        return self.title or self.name.replace("_", " ")

    @model_validator(mode="after")
    def _enum_type(self) -> "Slot":
        if self.type == "enum" and not self.enum:
            raise ValueError("a slot of type 'enum' needs a non-empty 'enum' list")
        return self


class HttpBinding(_Model):
    """An HTTP tool.  Secrets are ``${env:NAME}`` references (in ``url`` or ``headers``), resolved
    at call time; the host must be allowed by the operator (``workflows.policy``)."""

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    url: str = Field(min_length=1, max_length=2000)
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(default=10.0, gt=0, le=300)


class Binding(_Model):
    """How an API runs: exactly one of python / http / simulate."""

    python: str | None = Field(default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    http: HttpBinding | None = None
    simulate: bool | dict[str, Any] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "Binding":
        chosen = [k for k in ("python", "http", "simulate") if getattr(self, k) not in (None, False)]
        if len(chosen) != 1:
            raise ValueError(f"a binding needs exactly one of python, http, simulate (got {chosen or 'none'})")
        return self

    @property
    def kind(self) -> str:
        return "python" if self.python else "http" if self.http else "simulate"


class Api(_Model):
    """A tool the workflow may call. ``precondition`` names nodes that must have completed first."""

    name: str = Field(pattern=NAME_RE)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    returns: list[str] = Field(default_factory=list)
    precondition: list[str] = Field(default_factory=list)
    irreversible: bool = False
    binding: Binding = Field(default_factory=lambda: Binding(simulate=True))

    @property
    def required_params(self) -> list[str]:
        return list(self.parameters.get("required", []))

    @property
    def param_names(self) -> list[str]:
        return list(self.parameters.get("properties", {}))


class Answer(_Model):
    """A reply the agent may give; ``$name`` placeholders are filled from slots and returned values."""

    name: str = Field(pattern=NAME_RE)
    template: str = ""
    precondition: list[str] = Field(default_factory=list)

    @property
    def variables(self) -> list[str]:
        return [a or b for a, b in TEMPLATE_VAR.findall(self.template)]


class Representations(_Model):
    text: str | None = None
    code: str | None = None
    flowchart: str | None = None
    summary: str | None = None


class Workflow(_Model):
    """One workflow of the library (a FlowSwitch leaf, a FlowAgent PDL)."""

    name: str = Field(pattern=NAME_RE)
    title: str | None = None
    description: str = Field(min_length=1)
    detailed_description: str = ""
    domain: str = Field(pattern=NAME_RE)
    role: str = Field(pattern=NAME_RE)
    slots: list[Slot] = Field(default_factory=list)
    apis: list[Api] = Field(default_factory=list)
    answers: list[Answer] = Field(default_factory=list)
    procedure: str = ""
    representations: Representations = Field(default_factory=Representations)
    tags: list[str] = Field(default_factory=list)

    _source: Path | None = PrivateAttr(default=None)

    @property
    def source(self) -> Path | None:
        return self._source

    @property
    def display_name(self) -> str:
        return self.title or self.name.replace("_", " ")

    def api(self, name: str) -> Api | None:
        return next((a for a in self.apis if a.name == name), None)

    def answer(self, name: str) -> Answer | None:
        return next((a for a in self.answers if a.name == name), None)

    def slot(self, name: str) -> Slot | None:
        return next((s for s in self.slots if s.name == name), None)

    @property
    def node_names(self) -> set[str]:
        """Every node a precondition may name: APIs, declared ANSWERs and the built-ins."""
        return {a.name for a in self.apis} | {a.name for a in self.answers} | set(BUILTIN_ANSWERS)

    @property
    def value_names(self) -> set[str]:
        """Names a template or a condition may read: slots and every API's returned values."""
        names = {s.name for s in self.slots}
        for api in self.apis:
            names.update(api.returns)
            names.update(api.param_names)
        return names


class Domain(_Model):
    name: str = Field(pattern=NAME_RE)
    title: str | None = None
    description: str = Field(min_length=1)


class Role(_Model):
    name: str = Field(pattern=NAME_RE)
    title: str | None = None
    domain: str = Field(pattern=NAME_RE)
    description: str = Field(min_length=1)

    @field_validator("description")
    @classmethod
    def _strip(cls, v: str) -> str:
        return v.strip()
