"""Built-in handlers with external effects: email over SMTP and billing through Stripe."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from taskboard.core.kinds import KindRegistry


def register_handlers(registry: KindRegistry) -> None:
    """Register the `email` and `billing` kinds."""
    return None
