"""A kind's fleet-wide limits as the board shows them (status, dashboard, metrics)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KindLimitRow:
    """A kind's fleet-wide limits, the leases holding it, and the due jobs waiting on it."""

    kind: str
    max_running: int | None
    rate_per_second: float | None
    running: int
    waiting: int

    @property
    def summary(self) -> str:
        """`email: 14/s, at most 5 running (3 now), 312 waiting on the limit`."""
        parts = []
        if self.rate_per_second is not None:
            parts.append(f"{self.rate_per_second:g}/s")
        if self.max_running is not None:
            parts.append(f"at most {self.max_running} running ({self.running} now)")
        return f"{self.kind}: {', '.join(parts)}, {self.waiting} waiting on the limit"
