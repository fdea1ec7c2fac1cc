"""Events' names and fields, worked out once per event class (a log line per event asks)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

_names: dict[type[Any], str] = {}
_fields: dict[type[Any], tuple[str, ...]] = {}


def name_of(cls: type[Any]) -> str:
    """`CompletionRejected` -> `completion_rejected`."""
    return _names.get(cls) or _names.setdefault(cls, _snake(cls.__name__))


def field_names(cls: type[Any]) -> tuple[str, ...]:
    """The dataclass's field names, in order."""
    return _fields.get(cls) or _fields.setdefault(cls, tuple(f.name for f in fields(cls)))


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)
