"""Reading the understanding's model files (JSON written by ``flowdesk train ...``, validated by a pydantic
model): None when the file is absent — the caller then runs without it — and a clear error naming the file
and the field when it is there but cannot be read."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class ModelFileError(ValueError):
    """A model file that is present but cannot be read (the message names the file and the field)."""


def read_model(path: str | Path, model: type[M], trained_by: str) -> M | None:
    """The ``model`` in the JSON file ``path``; None when there is no such file.  ``trained_by``: the command
    that writes it (named in the error)."""
    p = Path(path)
    if not p.is_file():
        return None
    try:
        return model.model_validate_json(p.read_text(encoding="utf-8"))
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(map(str, err["loc"])) or "(file)"
        raise ModelFileError(f"{p}: field '{field}': {err['msg']} (retrain with `{trained_by}`)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ModelFileError(f"{p}: {e}") from None
