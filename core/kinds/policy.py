"""A kind's own policies (lease, retries, attempts) and fleet limits: their bounds, checked
when the kind is registered, so a bad value fails at import with the kind named instead of
inside every claim (a lease of 1e300 s makes `make_interval` fail in the statement).

The bounds are the worker settings' own (`taskboard.core.engine.settings`), repeated here
because `core.kinds` must not import the engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from taskboard.core.kinds.registry import KindRegistry

MIN_LEASE_SECONDS = 1.0
MAX_LEASE_SECONDS = 86_400.0
MAX_RETRY_SECONDS = 7 * 86_400.0
MAX_ATTEMPTS = 1000
MAX_RUNNING = 100_000
# The rate limit keeps one claim time per slot of its window in the limit's row; past a
# thousand a second the row itself would be the bottleneck (and no relay or API we know of
# allows that many to one sender).
MAX_RATE_PER_SECOND = 1000.0
MIN_RATE_PER_SECOND = 0.001


@dataclass(frozen=True, kw_only=True)
class KindPolicy:
    """A kind's own policies and fleet limits (`JobKind`'s keyword-only fields).

    lease_seconds, max_attempts, retry_base_seconds, retry_max_seconds: the kind's lease
        and retry policy; None takes the worker's setting (for max_attempts, the enqueue
        default). A job's own `max_attempts` at enqueue overrides the kind's.
    max_running, rate_per_second: fleet-wide limits, enforced by PostgreSQL at claim (see
        `taskboard.core.sql.limits`): at most N of its jobs hold a lease at once, at most R
        claims in any window of a second (one in any 1/R s when R < 1).
    """

    lease_seconds: float | None = None
    max_attempts: int | None = None
    retry_base_seconds: float | None = None
    retry_max_seconds: float | None = None
    max_running: int | None = None
    rate_per_second: float | None = None

    def __post_init__(self) -> None:
        check_policy(self)  # a JobKind's: refused at construction, kind and field named

    @property
    def limited(self) -> bool:
        """Whether the fleet limits this kind's claims (max_running or rate_per_second)."""
        return self.max_running is not None or self.rate_per_second is not None


def check_policy(kind: KindPolicy) -> None:
    """Raise `ValueError` naming the kind and the field for a policy out of its bounds."""
    _number(kind, "lease_seconds", kind.lease_seconds, MIN_LEASE_SECONDS, MAX_LEASE_SECONDS)
    _number(kind, "retry_max_seconds", kind.retry_max_seconds, 0.0, MAX_RETRY_SECONDS)
    high = kind.retry_max_seconds if kind.retry_max_seconds is not None else MAX_RETRY_SECONDS
    _number(kind, "retry_base_seconds", kind.retry_base_seconds, 0.0, high)
    _number(kind, "rate_per_second", kind.rate_per_second, MIN_RATE_PER_SECOND,
            MAX_RATE_PER_SECOND)
    _whole(kind, "max_attempts", kind.max_attempts, 1, MAX_ATTEMPTS)
    _whole(kind, "max_running", kind.max_running, 1, MAX_RUNNING)


def _number(kind: KindPolicy, name: str, value: object, low: float, high: float) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"job kind {_name(kind)!r}: {name} must be a number, got {value!r}")
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(
            f"job kind {_name(kind)!r}: {name} must be between {low:g} and {high:g}, got {value!r}"
        )


def _whole(kind: KindPolicy, name: str, value: object, low: int, high: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(
            f"job kind {_name(kind)!r}: {name} must be a whole number {low}-{high}, got {value!r}"
        )


def _name(kind: KindPolicy) -> str:
    return str(getattr(kind, "name", "?"))


def own_leases(registry: KindRegistry, kinds: Sequence[str]) -> dict[str, float]:
    """The kinds among `kinds` that set their own lease, and its length."""
    found = (registry.find(name) for name in kinds)
    return {k.name: k.lease_seconds for k in found if k is not None and k.lease_seconds}


def rate_window(rate: float) -> tuple[int, float]:
    """(claims allowed, window seconds) of a rate limit: `rate` claims in any second, or,
    below one a second, one claim in any 1/`rate` seconds. A fractional rate above one is
    rounded down (2.5/s allows 2 in any second): never more than asked."""
    if rate >= 1:
        return math.floor(rate), 1.0
    return 1, 1.0 / rate
