"""The workflow library: loads a ``domain/role/workflow.yaml`` tree and validates it as a whole.

``load_library(root)`` returns a ``Library`` or raises ``LibraryError`` listing every problem
(file, line, field).  ``check_library(root)`` returns the problems without raising, for
``flowdesk workflows validate``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


from .errors import Issue, LibraryError, parse_file
from .pdl import Domain, Role, Workflow
from .policy import BindingPolicy
from .validate import validate_workflow

DOMAIN_FILE = "_domain.yaml"
ROLE_FILE = "_role.yaml"


@dataclass
class Library:
    root: Path
    domains: dict[str, Domain] = field(default_factory=dict)
    roles: dict[str, Role] = field(default_factory=dict)
    workflows: dict[str, Workflow] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.workflows)

    def get(self, name: str) -> Workflow:
        try:
            return self.workflows[name]
        except KeyError:
            raise KeyError(f"no workflow named {name!r} in the library at {self.root}") from None

    def roles_of(self, domain: str) -> list[Role]:
        return [r for r in self.roles.values() if r.domain == domain]

    def workflows_of(self, role: str) -> list[Workflow]:
        return [w for w in self.workflows.values() if w.role == role]

    def stats(self) -> dict[str, int]:
        return {
            "domains": len(self.domains),
            "roles": len(self.roles),
            "workflows": len(self.workflows),
            "apis": sum(len(w.apis) for w in self.workflows.values()),
        }


def load_workflow(path: Path, policy: BindingPolicy | None = None) -> Workflow:
    """Load and validate one workflow file on its own (no library-level checks)."""
    wf, doc, issues = parse_file(Path(path), Workflow)
    if wf is not None:
        issues = issues + validate_workflow(wf, doc, policy)
    if issues:
        raise LibraryError(issues)
    wf._source = Path(path)
    return wf


def check_library(root: str | Path, policy: BindingPolicy | None = None) -> tuple[Library, list[Issue]]:
    """The library and every problem in it; bindings are checked against ``policy``
    (default: the operator's ``BindingPolicy.from_env()``)."""
    root = Path(root)
    policy = policy or BindingPolicy.from_env()
    lib = Library(root)
    issues: list[Issue] = []
    docs = {}  # workflow name -> its YamlDoc, to point later checks at the right line
    if not root.is_dir():
        return lib, [Issue(str(root), None, "", "library directory does not exist")]
    for path in sorted(root.rglob("*.yml")):  # silently skipping these would hide a workflow
        issues.append(Issue(str(path), None, "", "workflow files must end in .yaml (this one is ignored)"))
    for path in sorted(root.rglob("*.yaml")):
        rel = path.relative_to(root)
        depth = len(rel.parts)
        if path.name == DOMAIN_FILE:
            dom, doc, errs = parse_file(path, Domain)
            issues += errs
            if dom is not None:
                if depth != 2 or dom.name != rel.parts[0]:
                    issues.append(Issue(str(path), doc.line(("name",)), "name",
                                        f"domain {dom.name!r} must live in folder {dom.name}/"))
                lib.domains[dom.name] = dom
        elif path.name == ROLE_FILE:
            role, doc, errs = parse_file(path, Role)
            issues += errs
            if role is not None:
                if depth != 3 or (role.domain, role.name) != rel.parts[:2]:
                    issues.append(Issue(str(path), doc.line(("name",)), "name",
                                        f"role {role.name!r} of domain {role.domain!r} must live in "
                                        f"{role.domain}/{role.name}/"))
                if role.name in lib.roles:
                    issues.append(Issue(str(path), doc.line(("name",)), "name",
                                        f"duplicate role name {role.name!r}"))
                lib.roles[role.name] = role
        else:
            wf, doc, errs = parse_file(path, Workflow)
            issues += errs
            if wf is None:
                continue
            issues += validate_workflow(wf, doc, policy)
            wf._source = path
            if depth != 3 or (wf.domain, wf.role) != rel.parts[:2]:
                # point at the field that disagrees with the folder (the domain when both do)
                wrong = "role" if depth == 3 and wf.domain == rel.parts[0] else "domain"
                issues.append(Issue(str(path), doc.line((wrong,)), wrong,
                                    f"workflow of {wf.domain}/{wf.role} must live in {wf.domain}/{wf.role}/ "
                                    f"(it is in {'/'.join(rel.parts[:-1]) or '.'}/)"))
            if wf.name in lib.workflows:
                other = lib.workflows[wf.name].source
                issues.append(Issue(str(path), doc.line(("name",)), "name",
                                    f"duplicate workflow name {wf.name!r} (also in {other})"))
            lib.workflows[wf.name] = wf
            docs[wf.name] = doc
    for wf in lib.workflows.values():
        doc = docs[wf.name]
        # A description file that exists but failed to load was reported above already.
        if wf.domain not in lib.domains and not (root / wf.domain / DOMAIN_FILE).is_file():
            issues.append(Issue(str(wf.source), doc.line(("domain",)), "domain",
                                f"domain {wf.domain!r} has no description ({wf.domain}/{DOMAIN_FILE} is missing)"))
        if wf.role not in lib.roles and not (root / wf.domain / wf.role / ROLE_FILE).is_file():
            issues.append(Issue(str(wf.source), doc.line(("role",)), "role",
                                f"role {wf.role!r} has no description ({wf.domain}/{wf.role}/{ROLE_FILE} is missing)"))
    if not lib.workflows and not issues:
        issues.append(Issue(str(root), None, "", "no workflow files found"))
    return lib, issues


def load_library(root: str | Path, policy: BindingPolicy | None = None) -> Library:
    lib, issues = check_library(root, policy)
    if issues:
        raise LibraryError(issues)
    return lib


def bundled_library_path() -> Path:
    """The demo service desk that ships with flowdesk."""
    return Path(__file__).parent / "library"


def bundled_patterns_path() -> Path:
    """The conversation-repair patterns (ordinary PDL workflows, never indexed for retrieval)."""
    return Path(__file__).resolve().parent / "patterns"
