"""Job kinds: the registry, the context a handler gets, and the built-in kinds.

`registry` holds the types and never imports a handler; the handlers (`email`, `billing`,
`builtin`) import it, and `builtin_registry` gathers them, so nothing imports in a circle.
"""

from taskboard.core.kinds.builtin import builtin_registry
from taskboard.core.kinds.payload_rules import check_storable
from taskboard.core.kinds.registry import (
    Handler,
    JobContext,
    JobKind,
    JsonObject,
    KindRegistry,
    Validator,
)

__all__ = [
    "Handler",
    "JobContext",
    "JobKind",
    "JsonObject",
    "KindRegistry",
    "Validator",
    "builtin_registry",
    "check_storable",
]
