"""The rows the checker judges (jobs and attempts as the database kept them, or as they were
when deleted) and the list of violations it builds."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

MAX_LISTED = 8  # violations of one kind listed in full; the rest are counted
# A worker whose connections were silently dropped must work again within lease/2 + this
# (issue 22's target); until then it is not judged.
DROP_NOTICE_SECONDS = 5.0


@dataclass
class Job:
    """A job's last state: its row at the end, or the row a delete removed (`pruned_at`)."""

    id: int
    kind: str
    payload: Any
    attempts: int
    max_attempts: int
    leased: bool
    completed: bool
    dead: bool
    cancelled: bool
    last_error: str | None
    finished_at: datetime | None = None  # the latest of completed/failed/cancelled
    unique_key: str | None = None
    identity: str = ""  # what its Message-ID and idempotency keys are made of
    pruned_at: datetime | None = None  # when a delete removed it (None: still there)

    @property
    def finished(self) -> bool:
        """Completed, dead or cancelled."""
        return self.completed or self.dead or self.cancelled


@dataclass
class Attempt:
    """One claim of a job, from `taskboard_attempts` (or its archived copy)."""

    id: int
    job_id: int
    attempt: int
    token: UUID
    worker: str
    claimed_at: datetime
    ended_at: datetime | None
    outcome: str | None


@dataclass(frozen=True)
class EffectRecord:
    """A row of `taskboard_billing_charges`: what the database says was charged."""

    job_id: int
    payment_intent: str
    amount: int
    currency: str
    status: str | None  # None where the table has no status column


@dataclass(frozen=True)
class SendRecord:
    """A row of `taskboard_email_sends`: what the database says was handed to the relay."""

    job_id: int
    attempt: int
    message_id: str | None


@dataclass(frozen=True)
class Outage:
    """A database restart or freeze: when the server was back (its clock), who was running."""

    kind: str
    back_at: datetime
    workers: frozenset[str]


@dataclass(frozen=True)
class Window:
    """A stretch of wall-clock time a fault covered (a worker's, or the server's: None)."""

    kind: str
    worker: str | None
    start: datetime
    end: datetime


@dataclass(frozen=True)
class Sample:
    """The queue and the fleet at one moment: jobs claimable now, and per live worker
    (heartbeat age in seconds, in flight, capacity, state)."""

    at: datetime
    ready: int
    workers: dict[str, tuple[float, int, int, str]]


@dataclass(frozen=True)
class RetryDone:
    """An operator's retry that returned success; `at` is its transaction's database time."""

    job_id: int
    at: datetime


@dataclass(frozen=True)
class ScheduleRun:
    """A schedule the operator kept during the run (database times)."""

    name: str
    cron: str
    added_at: datetime
    removed_at: datetime | None = None


class Violations:
    """Collects violations by kind, listing the first few of each in full."""

    def __init__(self) -> None:
        self.by_kind: dict[str, list[str]] = defaultdict(list)

    def add(self, kind: str, detail: str) -> None:
        self.by_kind[kind].append(detail)

    def lines(self) -> list[str]:
        out = []
        for kind, details in self.by_kind.items():
            shown = details[:MAX_LISTED]
            more = f" (+{len(details) - len(shown)} more)" if len(details) > len(shown) else ""
            out.append(f"{kind} x{len(details)}: " + "; ".join(shown) + more)
        return out
