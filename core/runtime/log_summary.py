"""`taskboard worker`'s periodic summary line: what the worker did since the last one.

Routine claims and completions log at DEBUG (see `logs.EventLogger`), so the INFO stream
would not show that a busy worker is working at all. Every `every` seconds one line says
how many jobs it claimed, completed (and of which kinds), failed (to be retried), made
dead... in the interval, read from the counters the engine keeps (a dict increment per
completion is all the engine adds for it; it no longer builds two events per job). An
interval in which nothing happened writes nothing: an idle worker's log stays quiet. The
last line, at the stop, covers the rest of the run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the engine is imported only by the command that runs one
    from taskboard.core.engine.outcomes import WorkerCounters

DEFAULT_SUMMARY_SECONDS = 60.0
# The counters a summary reports, in the order a reader wants them.
COUNTED = ("claimed", "completed", "failed", "dead", "rejected", "lost", "released",
           "cancelled", "snoozed", "quarantined")


class JobSummary:
    """Logs `jobs_summary` lines from a worker's counters (`counters()` may be None before
    the worker exists)."""

    def __init__(
        self,
        worker_id: str,
        counters: Callable[[], WorkerCounters | None],
        every: float = DEFAULT_SUMMARY_SECONDS,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.worker_id = worker_id
        self.every = every
        self._counters = counters
        self._logger = logger or logging.getLogger("taskboard.events")
        self._clock = clock
        self._last: dict[str, int] = dict.fromkeys(COUNTED, 0)
        self._last_kinds: dict[str, int] = {}
        self._since = clock()

    def fields(self) -> dict[str, Any] | None:
        """The fields of the next summary, or None if nothing was counted since the last;
        moves the interval's start to now."""
        counters = self._counters()
        if counters is None:
            return None
        now = asdict_counts(counters)
        kinds = dict(counters.completed_by_kind)
        delta = {name: now[name] - self._last[name] for name in COUNTED}
        by_kind = {kind: n - self._last_kinds.get(kind, 0) for kind, n in sorted(kinds.items())}
        seconds = self._clock() - self._since
        self._last, self._last_kinds, self._since = now, kinds, self._clock()
        if not any(delta.values()):
            return None
        # Only what happened: a clean interval reads `claimed=... completed=...`.
        counts: dict[str, Any] = {name: value for name, value in delta.items() if value}
        if delta["completed"]:
            counts["completed_by_kind"] = {kind: n for kind, n in by_kind.items() if n}
        return {"event": "jobs_summary", "worker_id": self.worker_id,
                "seconds": round(seconds, 1), **counts,
                "completed_per_second": round(delta["completed"] / seconds, 2) if seconds else 0.0}

    def log(self) -> None:
        """Write one summary line now, if anything was counted since the last."""
        fields = self.fields()
        if fields is not None and self._logger.isEnabledFor(logging.INFO):
            self._logger.info("jobs_summary", extra={"fields": fields})

    def last(self) -> None:
        """At the stop: the rest of the run (unless summaries are off), so a burst run
        ends with what it did."""
        if self.every > 0:
            self.log()

    async def run(self) -> None:
        """Log a summary every `every` seconds until cancelled (0: never)."""
        if self.every <= 0:
            return
        while True:
            await asyncio.sleep(self.every)
            self.log()


def asdict_counts(counters: WorkerCounters) -> dict[str, int]:
    """The counted totals of `counters` (not its lateness samples); `failed` without the
    dead (the engine counts a dead job as failed too), so each job is counted once."""
    counts = {name: int(getattr(counters, name)) for name in COUNTED}
    counts["failed"] -= counts["dead"]
    return counts
