"""Built-in handlers with external effects: email over SMTP and billing through Stripe."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from taskboard.core.kinds import KindRegistry


def register_handlers(registry: KindRegistry) -> None:
    """Register the `email` and `billing` kinds."""
    # Imported here: kinds.py imports this package, and these modules import kinds.py.
    from taskboard.core.handlers.billing import BILLING
    from taskboard.core.handlers.email import EMAIL

    registry.register(EMAIL)
    registry.register(BILLING)
