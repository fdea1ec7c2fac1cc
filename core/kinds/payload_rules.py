"""What any payload must be, whatever its kind: storable by PostgreSQL (check_storable) and
within a byte limit (the registry's, a kind's own, or TASKBOARD_MAX_PAYLOAD_BYTES)."""

from __future__ import annotations

import os
from typing import Any

from taskboard.core.base.errors import ConfigError, ValidationError

MAX_PAYLOAD_DEPTH = 64
# Payload bytes (its JSON text, UTF-8) a job may carry unless its kind or the registry says
# otherwise. Every claim returns the payload whole: rows of 150 MB made every claim of their
# queue time out, for good.
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
# The largest limit any configuration may set. The schema refuses rows over twice this
# (`SCHEMA_PAYLOAD_CEILING`, migration 10's trigger, for rows written by hand): the database
# measures its own text form, which adds a space after each `:` and `,` (at most 1.5 times
# ours), so a payload its kind accepted is never refused by the schema.
MAX_PAYLOAD_LIMIT = 8 * 1024 * 1024
SCHEMA_PAYLOAD_CEILING = 2 * MAX_PAYLOAD_LIMIT
MIN_PAYLOAD_LIMIT = 1024
PAYLOAD_LIMIT_ENV = "TASKBOARD_MAX_PAYLOAD_BYTES"


def check_payload_limit(name: str, value: object) -> None:
    """A payload limit must be whole bytes within [`MIN_PAYLOAD_LIMIT`, `MAX_PAYLOAD_LIMIT`]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be a whole number of bytes, got {value!r}")
    if not MIN_PAYLOAD_LIMIT <= value <= MAX_PAYLOAD_LIMIT:
        raise ConfigError(
            f"{name} must be between {MIN_PAYLOAD_LIMIT} and {MAX_PAYLOAD_LIMIT} bytes, "
            f"got {value}"
        )


def limit_from_env() -> int:
    text = os.environ.get(PAYLOAD_LIMIT_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_PAYLOAD_BYTES
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(
            f"{PAYLOAD_LIMIT_ENV} must be a whole number of bytes, got {text[:40]!r}"
        ) from None
    check_payload_limit(PAYLOAD_LIMIT_ENV, value)
    return value


def check_storable(value: Any, path: str, depth: int = 0) -> None:
    """Refuse text PostgreSQL cannot store (NUL, lone surrogates), absurd numbers, and
    nesting deeper than `MAX_PAYLOAD_DEPTH` (deeper payloads broke the decoders on the way).

    Caught here, the enqueue fails with the field named; missed, the INSERT would fail with
    a driver error, or worse, a row would be written that no worker can decode.
    """
    where = path or "payload"
    if isinstance(value, str):
        if "\x00" in value:
            raise ValidationError(
                "holds a NUL character, which PostgreSQL cannot store", field=where
            )
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError("holds text that is not valid Unicode", field=where) from None
    elif isinstance(value, bool):
        return
    elif isinstance(value, int):
        if abs(value) >= 10**100:
            raise ValidationError("holds an integer too large to store", field=where)
    elif isinstance(value, dict | list):
        if depth >= MAX_PAYLOAD_DEPTH:
            shown = where if len(where) <= 60 else where[:57] + "..."
            raise ValidationError(
                f"is nested deeper than {MAX_PAYLOAD_DEPTH} levels", field=shown
            )
        if isinstance(value, dict):
            for key, item in value.items():
                check_storable(key, f"{path} key" if path else "key", depth + 1)
                check_storable(item, f"{path}.{key}" if path else str(key), depth + 1)
        else:
            for index, item in enumerate(value):
                check_storable(item, f"{path}[{index}]", depth + 1)
