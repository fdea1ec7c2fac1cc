"""What PostgreSQL can store of a JSON value: payloads at enqueue, step results, results."""

from __future__ import annotations

from typing import Any

from taskboard.core.errors import ValidationError

MAX_PAYLOAD_DEPTH = 64


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
