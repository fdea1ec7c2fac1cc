"""Immutable rows the dashboard renders: the board (`taskboard.core.view.status.read_board` plus
in-process effects), one job's detail, jobs by state and lease advice. The dashboard never
reads workers' internals or runs SQL; countdowns are `deadline - db_now`, never decremented.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from taskboard.core.view.effect_rows import ChargeRecord as ChargeRecord
from taskboard.core.view.effect_rows import ChargeSeen as ChargeSeen
from taskboard.core.view.effect_rows import EffectOfUncompleted as EffectOfUncompleted
from taskboard.core.view.effect_rows import Effects as Effects
from taskboard.core.view.effect_rows import EmailCopy as EmailCopy
from taskboard.core.view.effect_rows import EmailSeen as EmailSeen
from taskboard.core.view.effect_rows import SendRecord as SendRecord
from taskboard.core.view.effect_rows import SendSeen as SendSeen
from taskboard.core.view.effect_rows import effect_lines
from taskboard.core.view.effect_rows import money as money
from taskboard.core.view.limit_rows import KindLimitRow as KindLimitRow
from taskboard.core.view.step_rows import StepRecord, shown_result, step_line


@dataclass(frozen=True)
class WorkerRow:
    """One worker of the fleet, embedded or remote, as registered in `taskboard_workers`."""

    id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    state: str  # running | paused | pausing | draining | unhealthy | stopped | gone
    in_flight: int
    capacity: int
    lease_seconds: float
    renewals_ok: int
    renewals_failed: int
    pool_max: int
    pool_in_use: int
    pool_idle: int
    pool_waiting: int
    embedded: bool = False
    kinds: tuple[str, ...] = ()
    last_error: str | None = None  # an unexpected error it met (why it is unhealthy)


@dataclass(frozen=True)
class ClaimRow:
    """A job currently claimed (lease not yet completed), with its lease deadline."""

    job_id: int
    kind: str
    queue: str
    worker_id: str
    token: str
    attempt: int
    max_attempts: int
    claimed_at: datetime
    lease_expires_at: datetime
    lease_seconds: float
    reclaimed_from: str | None = None  # the worker whose expired lease this claim took over

    def seconds_left(self, now: datetime) -> float:
        """Time left on the lease at DB time `now` (negative once expired)."""
        return (self.lease_expires_at - now).total_seconds()

    @property
    def short_token(self) -> str:
        """First 8 hex digits of the token, enough to tell claims apart on screen."""
        return self.token.replace("-", "")[:8]


@dataclass(frozen=True)
class FailureRow:
    """A renewal failure, lost lease or rejected completion, for the failures log."""

    at: datetime
    job_id: int
    worker_id: str
    token: str
    outcome: str  # lease_lost | completion_rejected | renewal_failed | effect_refused | ...
    detail: str = ""


@dataclass(frozen=True)
class DeadRow:
    """A dead job an operator may retry."""

    job_id: int
    kind: str
    attempts: int
    last_error: str
    failed_at: datetime


@dataclass(frozen=True)
class JobCounts:
    pending: int = 0
    scheduled: int = 0
    claimed: int = 0
    expired: int = 0
    completed: int = 0
    dead: int = 0
    cancelled: int = 0


@dataclass(frozen=True)
class OrphanKind:
    """Jobs waiting in a queue for a kind that no live worker runs."""

    kind: str
    queue: str
    waiting: int
    queue_worked: bool = True  # False: no live worker works the queue at all


@dataclass(frozen=True)
class PausedQueueRow:
    """A queue an operator paused, and what waits in it."""

    name: str
    paused_at: datetime
    reason: str | None
    waiting: int


@dataclass(frozen=True)
class ScheduleRow:
    """A periodic job and its next slot (database clock); a disabled one (or one that cannot
    be evaluated) has no next run and says why in `error`."""

    name: str
    cron: str
    kind: str
    queue: str
    last_slot: datetime | None
    next_run: datetime | None
    error: str | None = None


@dataclass(frozen=True)
class Activity:
    """The last `window` seconds: completions, pickup p50, lost leases, rejected completions."""

    window: float = 0.0
    completed: int = 0
    pickup_p50: float | None = None
    lost: int = 0


@dataclass(frozen=True)
class LinkHealth:
    """How the dashboard's link to the database stands, read at a moment (`time.monotonic`)."""

    last_answer_age: float | None = None  # seconds since the database last answered
    waiting_for: str | None = None  # what the link waits on now (a refresh, a command)
    waiting_seconds: float = 0.0  # for how long
    last_error: str | None = None  # why the last use failed, one line, secrets masked


@dataclass(frozen=True)
class Trends:
    """Buckets of `step` s, oldest first: every worker's completions and lost leases; renewal
    lateness of this dashboard's workers only (`lateness_scope`)."""

    step: float = 5.0
    completed_per_s: tuple[float, ...] = ()
    pickup_p50: tuple[float | None, ...] = ()  # seconds, latest claims in the bucket
    renewal_lateness: tuple[float | None, ...] = ()  # worst in the bucket, seconds
    lost: tuple[int, ...] = ()  # lost leases and rejected completions in the bucket
    lateness_scope: str = "this dashboard's workers"


@dataclass(frozen=True)
class BoardSnapshot:
    """Everything one dashboard frame shows, from one refresh."""

    db_now: datetime
    database: str  # DSN with the password masked
    mode: str  # "embedded" | "attached" | "demo"
    workers: tuple[WorkerRow, ...] = ()
    claims: tuple[ClaimRow, ...] = ()
    claims_total: int = 0
    failures: tuple[FailureRow, ...] = ()
    dead: tuple[DeadRow, ...] = ()
    counts: JobCounts = field(default_factory=JobCounts)
    orphans: tuple[OrphanKind, ...] = ()
    paused_queues: tuple[PausedQueueRow, ...] = ()
    schedules: tuple[ScheduleRow, ...] = ()
    activity: Activity = field(default_factory=Activity)
    trends: Trends = field(default_factory=Trends)
    effects: Effects = field(default_factory=Effects)
    limits: tuple[KindLimitRow, ...] = ()
    connected: bool = True
    error: str | None = None  # why the last refresh failed, shown as a banner


@dataclass(frozen=True)
class AttemptRow:
    """One claim of a job and how it ended."""

    ordinal: int  # 1 for the job's first claim, counting every claim, retries included
    token: str
    worker: str
    claimed_at: datetime
    ended_at: datetime | None
    superseded_at: datetime | None  # when another worker's claim took the lease over
    renewal_failed_at: datetime | None
    outcome: str | None  # None while it runs
    error: str | None
    pickup_seconds: float | None
    handler_seconds: float | None
    min_margin_seconds: float | None


@dataclass(frozen=True)
class JobAction:
    """What an operator did to a job by filter (retried, cancelled), when, and the filter."""

    action: str
    at: datetime
    detail: str


@dataclass(frozen=True)
class JobDetail:
    """One job: its row (payload secrets masked), every attempt, the effects seen for it."""

    id: int
    kind: str
    queue: str
    state: str  # pending | scheduled | waiting | running | completed | dead | cancelled
    payload: dict[str, object]
    attempts_used: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    finished_at: datetime | None
    last_error: str | None
    unique_key: str | None
    timeout_seconds: float | None
    holder: str | None
    lease_expires_at: datetime | None
    attempts: tuple[AttemptRow, ...] = ()
    emails: tuple[EmailCopy, ...] = ()
    charges: tuple[ChargeRecord, ...] = ()
    effects_scope: str = ""  # whose records the emails and charges come from
    sends: tuple[SendRecord, ...] = ()  # from taskboard_email_sends: every relay, any process
    steps: tuple[StepRecord, ...] = ()  # durable steps' checkpoints, refused ones too
    result: Any = None  # what the handler returned (JSON), once completed
    after: tuple[str, ...] = ()  # its parents ("#12 email running"): what a waiting job waits on
    trace_id: str | None = None  # the enqueuer's trace (W3C, 32 hex digits), for a trace viewer
    actions: tuple[JobAction, ...] = ()  # operators' retries and cancels by filter
    kind_timeout_seconds: float | None = None  # the kind's, when the job has none of its own

    @property
    def effects_on_record(self) -> list[str]:
        """The recorded charges and sends, one line each, with the job's fate."""
        return effect_lines(self.state, self.charges, self.sends)

    @property
    def flow_lines(self) -> list[str]:
        """What it waits on (its parents), its steps (refused checkpoints too) and its
        result, one line each; empty for a job without any."""
        lines = [f"after: {', '.join(self.after)}"] if self.after else []
        lines += [f"step {step_line(s)}" for s in self.steps]
        if self.result is not None:
            lines.append(f"result: {shown_result(self.result)}")
        return lines


@dataclass(frozen=True)
class JobListRow:
    id: int
    kind: str
    queue: str
    priority: int
    attempts: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    finished_at: datetime | None
    claimed_by: str | None
    lease_expires_at: datetime | None
    last_error: str


@dataclass(frozen=True)
class KindAdvice:
    """How a kind's handlers ran against the lease their workers held: what
    `lease_judgement.judge` decides the kind's lease on."""

    kind: str
    samples: int
    p50: float
    p99: float
    longest: float
    least_margin: float | None  # least lease time left at a renewal, seconds
    lease: float
