"""Which bindings may run: the operator's least-privilege policy for python and http tools.

A workflow file is data, and whoever writes it must not be able to run arbitrary code or reach
arbitrary hosts through the agent.  ``BindingPolicy`` says what is allowed; the validator
(``validate.py``) refuses everything else with file:line, and ``ToolRunner`` (``bindings.py``)
checks again before every call.

- **python**: ``module:function`` resolves only inside flowdesk's own tool modules
  (``BUNDLED_TOOL_MODULES``: the demo desk's tools and the STAR knowledge base) and the modules or
  packages the operator lists in ``FLOWDESK_TOOL_MODULES`` (comma separated; ``acme.tools`` allows
  ``acme.tools`` and ``acme.tools.*``).  The function must exist, be callable, be public and be
  *defined* in an allowed module (a helper a tool module merely imports, e.g. ``os.system``
  imported into it, is refused).  Checking existence imports the module, which is done only for
  allowed modules.
- **http**: the URL's host must be in ``FLOWDESK_HTTP_HOSTS`` (comma separated ``host`` or
  ``host:port``; ``*.example.com`` allows sub-domains).  The default is none: every http binding
  is refused until an operator allows its host.  Only ``http``/``https``; the host is never taken
  from a ``${env:NAME}`` reference.  Credentials are written as ``${env:NAME}`` references
  (in the URL or a header), never literally.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import parse_qsl, urlsplit

from .sanitize import ENV_REF

ENV_TOOL_MODULES = "FLOWDESK_TOOL_MODULES"
ENV_HTTP_HOSTS = "FLOWDESK_HTTP_HOSTS"
BUNDLED_TOOL_MODULES = ("workflows.demo.tools", "workflows.importers.star_kb")
_SECRET_PARAM = re.compile(r"(?i)^(?:api[_-]?key|apikey|key|access[_-]?token|token|secret|client[_-]?secret|"
                           r"password|passwd|pwd|signature|sig|auth)$")
_SECRET_HEADER = re.compile(r"(?i)^(?:authorization|proxy-authorization|x-api-key|api-key|cookie|x-auth-token)$")


class BindingRefused(PermissionError):
    """A binding the policy does not allow (the message names the binding and what to change)."""


def _split_env(name: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in os.environ.get(name, "").split(",") if p.strip())


@dataclass(frozen=True)
class BindingPolicy:
    tool_modules: tuple[str, ...] = BUNDLED_TOOL_MODULES
    http_hosts: tuple[str, ...] = ()
    _resolved: dict = field(default_factory=dict, compare=False, repr=False, hash=False)
    _lock: Any = field(default_factory=threading.Lock, compare=False, repr=False, hash=False)

    @classmethod
    def from_env(cls) -> "BindingPolicy":
        """Bundled tool modules + ``FLOWDESK_TOOL_MODULES``; hosts from ``FLOWDESK_HTTP_HOSTS``."""
        extra = tuple(m for m in _split_env(ENV_TOOL_MODULES) if m not in BUNDLED_TOOL_MODULES)
        return cls(tool_modules=BUNDLED_TOOL_MODULES + extra,
                   http_hosts=tuple(h.lower() for h in _split_env(ENV_HTTP_HOSTS)))

    # --- python ------------------------------------------------------------------------------------

    def module_allowed(self, module: str) -> bool:
        return any(module == m or module.startswith(m + ".") for m in self.tool_modules)

    def _allowed_words(self) -> str:
        return ", ".join(self.tool_modules)

    def resolve_python(self, target: str) -> Callable:
        """The function a ``module:function`` binding names; ``BindingRefused`` says why not."""
        with self._lock:
            if target in self._resolved:
                return self._resolved[target]
        module, sep, name = target.partition(":")
        if not sep or not module or not name:
            raise BindingRefused(f"{target!r} must look like 'package.module:function'")
        if not self.module_allowed(module):
            raise BindingRefused(
                f"module {module!r} is not an allowed tool module (allowed: {self._allowed_words()}; "
                f"an operator can allow more with {ENV_TOOL_MODULES}=package1,package2)")
        if name.startswith("_"):
            raise BindingRefused(f"{target!r}: {name!r} is private; bind a public function")
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package that does not exist
            found = False
        if not found:
            raise BindingRefused(f"module {module!r} does not exist (not importable)")
        try:
            mod = importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - the module's own import failure, reported by name
            raise BindingRefused(f"module {module!r} cannot be imported: {type(exc).__name__}: {exc}") from None
        try:
            fn = getattr(mod, name)
        except AttributeError:
            raise BindingRefused(f"module {module!r} has no function {name!r}") from None
        if inspect.ismodule(fn) or inspect.isclass(fn) or not callable(fn):
            raise BindingRefused(f"{target!r} is not a function")
        defined_in = getattr(fn, "__module__", None) or module
        if not self.module_allowed(defined_in):
            raise BindingRefused(f"{target!r} is imported into {module!r} from {defined_in!r}, which is not an "
                                 f"allowed tool module; bind a function defined in the tool module")
        with self._lock:
            self._resolved[target] = fn
        return fn

    # --- http --------------------------------------------------------------------------------------

    def host_allowed(self, host: str, port: int | None) -> bool:
        host = host.lower().rstrip(".")
        for allowed in self.http_hosts:
            a_host, _, a_port = allowed.partition(":") if not allowed.startswith("[") else (allowed, "", "")
            if a_port and (port is None or str(port) != a_port):
                continue
            if a_host == host or (a_host.startswith("*.") and host.endswith(a_host[1:])):
                return True
        return False

    def http_problems(self, url: str, headers: dict[str, str] | None = None) -> list[tuple[str, str]]:
        """``(field, message)`` for every reason an http binding is refused; [] when allowed."""
        out: list[tuple[str, str]] = []
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            return [("url", f"not a valid URL: {exc}")]
        if parts.scheme not in ("http", "https"):
            out.append(("url", f"scheme must be http or https (got {parts.scheme or 'none'!r})"))
        host = parts.hostname or ""
        if not host:
            out.append(("url", "the URL has no host"))
        elif ENV_REF.search(parts.netloc.rpartition("@")[2]):
            out.append(("url", "the host must be written literally, not as an ${env:...} reference"))
        elif not self.host_allowed(host, port):
            allowed = ", ".join(self.http_hosts) or "none"
            out.append(("url", f"host {host!r} is not an allowed http host (allowed: {allowed}; an operator "
                               f"allows hosts with {ENV_HTTP_HOSTS}=host1,host2:port)"))
        if parts.password and not ENV_REF.fullmatch(parts.password):
            out.append(("url", "the URL holds a literal password; write it as ${env:NAME}"))
        for k, v in parse_qsl(parts.query, keep_blank_values=True):
            if _SECRET_PARAM.match(k) and v and not ENV_REF.fullmatch(v):
                out.append(("url", f"query parameter {k!r} holds a literal secret; write it as ${{env:NAME}}"))
        for k, v in (headers or {}).items():
            if _SECRET_HEADER.match(k) and v and not ENV_REF.search(v):
                out.append((f"headers.{k}", "holds a literal credential; write it as ${env:NAME}"))
        return out
