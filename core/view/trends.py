"""The last few minutes of the fleet, bucketed for the dashboard's sparklines.

Fed from two sides: every refresh of the board (completions from the kept counts, lost
leases from the failures log, pickup latency from the latest claims: all workers, wherever
they run), and the embedded workers' events (renewal lateness is known only to the worker
that renewed, so that line covers this dashboard's workers alone and says so). Events
arrive on the workers' thread, refreshes on the dashboard's, hence the lock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from taskboard.core.engine.events import Event, Renewed
from taskboard.core.view.board import BoardSnapshot, Trends

STEP_SECONDS = 5.0
SPAN_SECONDS = 300.0
_LOST = frozenset({"lease_lost", "completion_rejected"})


class TrendRecorder:
    """Buckets of `step` seconds over the last `span` seconds."""

    def __init__(
        self,
        *,
        step: float = STEP_SECONDS,
        span: float = SPAN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.step = step
        self._buckets = max(1, math.ceil(span / step))
        self._clock = clock
        self._lock = threading.Lock()
        self._completed: dict[int, int] = {}
        self._pickup: dict[int, float] = {}
        self._lateness: dict[int, float] = {}
        self._lost: dict[int, int] = {}
        self._last_completed: int | None = None
        self._seen_lost: set[tuple[int, str, str]] = set()
        self._primed = False

    def clear(self) -> None:
        """Forget everything (the demo starts again)."""
        with self._lock:
            for series in (self._completed, self._pickup, self._lateness, self._lost):
                series.clear()
            self._last_completed = None
            self._seen_lost = set()
            self._primed = False

    def on_event(self, event: Event) -> None:
        """An embedded worker's event (any thread)."""
        if isinstance(event, Renewed):
            with self._lock:
                slot = self._slot()
                self._lateness[slot] = max(self._lateness.get(slot, 0.0), event.lateness)

    def observe(self, snapshot: BoardSnapshot) -> Trends:
        """Take in one refresh of the board; returns the trends including it."""
        with self._lock:
            slot = self._slot()
            done = snapshot.counts.completed
            if self._last_completed is not None:
                # Pruning lowers the kept count: that is rows deleted, not work undone.
                gained = max(0, done - self._last_completed)
                self._completed[slot] = self._completed.get(slot, 0) + gained
            self._last_completed = done
            if snapshot.activity.pickup_p50 is not None:
                self._pickup[slot] = snapshot.activity.pickup_p50
            shown = {
                (f.job_id, f.token, f.outcome) for f in snapshot.failures if f.outcome in _LOST
            }
            fresh = len(shown - self._seen_lost)
            if fresh and self._primed:  # the log's lines at the first refresh are history
                self._lost[slot] = self._lost.get(slot, 0) + fresh
            # The log is newest-last and a line that scrolled out never comes back, so
            # remembering what is shown now is enough to count each line once.
            self._seen_lost = shown
            self._primed = True
            self._forget(slot)
            return self._trends(slot)

    def _slot(self) -> int:
        return int(self._clock() // self.step)

    def _forget(self, slot: int) -> None:
        oldest = slot - self._buckets + 1
        for series in (self._completed, self._pickup, self._lateness, self._lost):
            for key in [k for k in series if k < oldest]:
                del series[key]

    def _trends(self, slot: int) -> Trends:
        slots = range(slot - self._buckets + 1, slot + 1)
        return Trends(
            step=self.step,
            completed_per_s=tuple(self._completed.get(s, 0) / self.step for s in slots),
            pickup_p50=tuple(self._pickup.get(s) for s in slots),
            renewal_lateness=tuple(self._lateness.get(s) for s in slots),
            lost=tuple(self._lost.get(s, 0) for s in slots),
        )
