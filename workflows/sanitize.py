"""Text that is safe to process and safe to show: normalisation and redaction.

Owns two things every layer needs and none should re-implement:

- ``normalize_text(value)``: any user or file text → a clean ``str``: bytes decoded as UTF-8 with
  invalid sequences replaced (U+FFFD), lone surrogates replaced, control characters other than
  tab/newline removed (a NUL or an escape sequence must not reach an embedding model, a log or a
  terminal), CRLF folded to LF, Unicode NFC.
- ``redact(text)`` / ``redact_data(obj)``: remove secrets before a text becomes an error message,
  a tool result, a log line, a trace or a checkpoint.  It removes every value registered with
  ``register_secret`` (the values of ``${env:NAME}`` references an http binding resolved, the API
  keys of LLM roles), the password of ``scheme://user:password@host`` URLs, the values of query
  parameters and ``key=value`` pairs whose name says secret (``api_key``, ``token``, ``password``,
  ``signature``, ...), ``Bearer``/``Basic`` credentials and well-known key shapes (``sk-...``).

``${env:NAME}`` references (``ENV_REF``) are how a workflow file names a secret without holding it;
``resolve_env_refs`` replaces them at call time and registers the values for redaction.
``RedactingFilter`` applies ``redact`` to the log records of the HTTP clients that see resolved URLs.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import unicodedata
from typing import Any

REDACTED = "[REDACTED]"
ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")

# Control characters except \t and \n (\r is folded into \n first); DEL and the C1 range too.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")

# Names whose value is a credential wherever they appear as name=value / "name": "value".
_SECRET_NAMES = (r"api[_-]?key|apikey|access[_-]?token|refresh[_-]?token|id[_-]?token|auth[_-]?token|token|"
                 r"secret|client[_-]?secret|password|passwd|pwd|signature|sig|x-api-key|private[_-]?key|session[_-]?id")
_NAME_VALUE = re.compile(
    rf"(?i)(?P<name>\b(?:{_SECRET_NAMES})\b)(?P<sep>[\"']?\s*[:=]\s*[\"']?)(?P<value>[^\s&\"',;}}\])]+)")
_URL_PASSWORD = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^\s:@/]*):(?P<pw>[^\s@/]+)@")
_AUTH_HEADER = re.compile(r"(?i)\b(?P<kind>bearer|basic|token)\s+(?P<cred>[A-Za-z0-9._~+/=-]{8,})")
# Key shapes providers print back in their error messages (OpenAI-style sk-..., GitHub ghp_..., AWS AKIA...).
_KEY_SHAPES = re.compile(r"\b(?:sk-[A-Za-z0-9_-]{8,}|gh[pousr]_[A-Za-z0-9]{16,}|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,})")

_SECRETS: set[str] = set()
_LOCK = threading.Lock()
MIN_SECRET_CHARS = 4  # shorter values would redact ordinary words


MAX_MESSAGE_CHARS = 20_000  # longer user messages are refused (embedding/LLM inputs stay bounded)


def normalize_text(value: Any) -> str:
    """A clean ``str`` from any text input (see the module docstring); never raises."""
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray, memoryview)):
        text = bytes(value).decode("utf-8", errors="replace")
    elif isinstance(value, str):
        text = value
    else:
        text = str(value)
    # Lone surrogates (e.g. from surrogateescape-decoded stdin or JSON "\ud800") cannot be encoded.
    if _SURROGATE.search(text):
        text = _SURROGATE.sub("\ufffd", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    return unicodedata.normalize("NFC", text)


def register_secret(value: str | None) -> None:
    """Remember a secret value so ``redact`` removes it from every text from now on."""
    if value and len(value) >= MIN_SECRET_CHARS:
        with _LOCK:
            _SECRETS.add(value)


def resolve_env_refs(text: str, *, what: str = "value") -> str:
    """Replace ``${env:NAME}`` by the variable's value (registered as a secret).

    Raises ``LookupError`` naming the variable (never a value) when it is not set."""

    def sub(m: re.Match) -> str:
        name = m.group(1)
        value = os.environ.get(name)
        if value is None:
            raise LookupError(f"{what}: environment variable {name} is not set")
        register_secret(value)
        return value

    return ENV_REF.sub(sub, text)


def redact(text: Any) -> str:
    """``text`` with every secret removed (registered values and credential-shaped parts)."""
    if text is None:
        return ""
    out = text if isinstance(text, str) else str(text)
    with _LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)  # longest first: a key containing another
    for s in secrets:
        if s in out:
            out = out.replace(s, REDACTED)
    out = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", out)
    out = _NAME_VALUE.sub(lambda m: f"{m['name']}{m['sep']}{m['value'] if _is_placeholder(m['value']) else REDACTED}", out)
    out = _AUTH_HEADER.sub(lambda m: f"{m['kind']} {REDACTED}", out)
    out = _KEY_SHAPES.sub(REDACTED, out)
    return out


def _is_placeholder(value: str) -> bool:
    return value.startswith(REDACTED[:-1]) or value.startswith("${env:")


def strip_secrets(obj: Any) -> Any:
    """The operator's registered secrets (``${env:NAME}`` values) removed from every string of a JSON-like
    value — and nothing else: what a tool returns (a session token, say) is the workflow's data, which
    later calls need; only logs and traces go through the stricter ``redact_data``."""
    with _LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    if not secrets:
        return obj

    def walk(o: Any) -> Any:
        if isinstance(o, str):
            for sec in secrets:
                if sec in o:
                    o = o.replace(sec, REDACTED)
            return o
        if isinstance(o, dict):
            return {k: walk(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return type(o)(walk(v) for v in o)
        return o

    return walk(obj)


def redact_data(obj: Any) -> Any:
    """``redact`` applied to every string of a JSON-like value (keys named like secrets lose their value)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(k, str) and re.fullmatch(rf"(?i)(?:{_SECRET_NAMES})", k) and isinstance(v, str) and v \
                    and not _is_placeholder(v):
                out[k] = REDACTED
            else:
                out[k] = redact_data(v)
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_data(v) for v in obj)
    return obj


class RedactingFilter(logging.Filter):
    """Redacts a log record's text before any handler sees it.

    HTTP clients log every request's full URL (httpx at INFO: ``HTTP Request: POST https://...?api_key=...``),
    after the binding resolved its ``${env:...}`` references — a log handler anywhere (a server's, a
    test's, an operator's) would otherwise write the key."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is the logging module's to report
            return True
        clean = redact(text)
        if clean != text:
            record.msg, record.args = clean, None
        return True


# The loggers that see resolved URLs and headers: the HTTP clients of http bindings and LLM providers.
# A filter on a logger applies only to records created on that logger, so each is named.
def user_args(args: dict[str, Any], slots: Any) -> dict[str, Any]:
    """The arguments of a call a person may be shown: the values the user gave (``slots``: the workflow's
    slot names), never one another call returned for the tools (an auth token) nor anything named like a
    secret; all the non-secret ones when none is a slot."""
    public = {k: v for k, v in redact_data(args).items() if v != REDACTED}
    return {k: v for k, v in public.items() if k in slots} or public


REDACTED_LOGGERS = ("httpx", "httpcore", "openai", "openai._base_client")
_FILTER = RedactingFilter()
for _name in REDACTED_LOGGERS:
    if _FILTER not in logging.getLogger(_name).filters:
        logging.getLogger(_name).addFilter(_FILTER)
