"""An application whose import fails, as one with a missing setting would."""

from taskboard.core import KindRegistry

registry = KindRegistry()
raise RuntimeError("SHAPES_API_KEY is not set")
