"""What stopping a fleet did to its embedded workers' jobs, for the lines the dashboard
prints once its screen is gone: a quit with jobs running waits up to the drain's limit for
their handlers, and the operator is told how many were running and how each ended."""

from __future__ import annotations

from dataclasses import dataclass, replace

from taskboard.core.engine.events import Completed, Event, LeftToExpire, Released


@dataclass(frozen=True)
class DrainReport:
    """The drain as it starts (`done` False) or once the workers have stopped."""

    workers: int
    running: int
    drain_seconds: float
    done: bool = False
    completed: int = 0
    released: int = 0  # leases given back: another worker claims the job at once
    left_to_expire: int = 0  # not released: a call that cannot be cut, or an outage

    @property
    def otherwise(self) -> int:
        """Jobs that ended another way: failed (to be retried), snoozed, cancelled, lost."""
        return max(0, self.running - self.completed - self.released - self.left_to_expire)


class DrainCounter:
    """Counts the drain's endings from the workers' events (on the workers' loop)."""

    def __init__(self, start: DrainReport) -> None:
        self.report = start

    def __call__(self, event: Event) -> None:
        report = self.report
        if isinstance(event, Completed):
            self.report = replace(report, completed=report.completed + 1)
        elif isinstance(event, Released):
            self.report = replace(report, released=report.released + 1)
        elif isinstance(event, LeftToExpire):
            self.report = replace(report, left_to_expire=report.left_to_expire + 1)
