"""Names an operator types: queue names, checked the same way wherever they are given."""

from __future__ import annotations

from taskboard.core.base.errors import ConfigError
from taskboard.core.base.secrets import first_unprintable

MAX_QUEUE_NAME = 100


def check_queue_name(name: object, what: str = "queue") -> str:
    """A queue name: 1-100 printable characters, no control characters, not padded."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{what} name must not be empty")
    if len(name) > MAX_QUEUE_NAME:
        raise ConfigError(f"{what} name is longer than {MAX_QUEUE_NAME} characters")
    if any(ord(ch) < 32 or 127 <= ord(ch) < 160 for ch in name):
        raise ConfigError(f"{what} name {name!r} holds a line break or control character")
    if name != name.strip():
        raise ConfigError(f"{what} name {name!r} starts or ends with a space")
    bad = first_unprintable(name)
    if bad is not None:
        kind = (
            "text that is not valid Unicode"
            if 0xD800 <= ord(bad) <= 0xDFFF
            else f"the unprintable character U+{ord(bad):04X}"
        )
        raise ConfigError(f"{what} name {name!r} holds {kind}")
    return name
