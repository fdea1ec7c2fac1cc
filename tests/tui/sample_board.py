"""A fixed board for snapshot tests, screenshots and UI work without a database.

`FixedBoard` implements `BoardControl` by serving a hand-built `BoardSnapshot` and
recording the commands it receives. Every timestamp is derived from `DB_NOW`, a frozen
instant, so a screen rendered from these fixtures is the same on every run. No SQL here:
this module only builds the snapshot objects the engine would otherwise produce.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from taskboard.core.operations.job_bulk import BulkResult, Preview
from taskboard.core.view.board import (
    AttemptRow,
    BoardSnapshot,
    ChargeSeen,
    ClaimRow,
    DeadRow,
    Effects,
    EmailSeen,
    FailureRow,
    JobCounts,
    JobDetail,
    JobListRow,
    KindAdvice,
    LinkHealth,
    PausedQueueRow,
    ScheduleRow,
    Trends,
    WorkerRow,
)
from taskboard.core.view.control import CommandRefused, KindOffer
from taskboard.core.view.health import HealthReport, TableHealth, Thresholds, XminHolder, grade

DB_NOW = datetime(2026, 3, 14, 9, 26, 53, tzinfo=UTC)
"""The database clock of every fixture."""

DATABASE = "postgresql://taskboard:***@db.internal:5432/taskboard"
"""A DSN as the engine shows it: password already masked."""

LEASE = 60.0
"""Production default lease, seconds."""

DEMO_LEASE = 10.0
"""Short demo lease, seconds, so the training story fits in a minute."""


def at(seconds: float) -> datetime:
    """`DB_NOW` shifted by `seconds` (negative = in the past)."""
    return DB_NOW + timedelta(seconds=seconds)


def token(n: int) -> str:
    """A deterministic UUID-shaped lease token."""
    return f"{n:08x}-7c1e-4b2a-9d3f-{n * 7919:012x}"


class FrozenClock:
    """A wall clock that only moves when told to, for the "data from N s ago" banner."""

    def __init__(self, now: datetime = DB_NOW) -> None:
        self.now = now
        """The time `__call__` returns."""

    def __call__(self) -> datetime:
        """The current frozen time."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.now += timedelta(seconds=seconds)


def worker(
    worker_id: str,
    *,
    host: str = "opsbox",
    state: str = "running",
    in_flight: int = 0,
    capacity: int = 8,
    lease_seconds: float = LEASE,
    renewals_ok: int = 0,
    renewals_failed: int = 0,
    heartbeat_age: float = 1.0,
    pool_in_use: int | None = None,
    pool_waiting: int = 0,
    embedded: bool = True,
    kinds: tuple[str, ...] = ("email", "billing", "sleep"),
) -> WorkerRow:
    """A worker row with a consistent pool: max = capacity + 2 reserved, in use = the two
    reserved connections plus one per job held."""
    pool_max = capacity + 2
    in_use = min(pool_max, in_flight + 2) if pool_in_use is None else pool_in_use
    return WorkerRow(
        id=worker_id,
        host=host,
        pid=4211,
        started_at=at(-3600),
        heartbeat_at=at(-heartbeat_age),
        state=state,
        in_flight=in_flight,
        capacity=capacity,
        lease_seconds=lease_seconds,
        renewals_ok=renewals_ok,
        renewals_failed=renewals_failed,
        pool_max=pool_max,
        pool_in_use=in_use,
        pool_idle=max(0, pool_max - in_use),
        pool_waiting=pool_waiting,
        embedded=embedded,
        kinds=kinds,
    )


def claim(
    job_id: int,
    kind: str,
    worker_id: str,
    *,
    seconds_left: float,
    token_no: int,
    attempt: int = 1,
    max_attempts: int = 5,
    lease_seconds: float = LEASE,
    reclaimed_from: str | None = None,
) -> ClaimRow:
    """A claim whose lease has `seconds_left` at `DB_NOW`."""
    return ClaimRow(
        job_id=job_id,
        kind=kind,
        queue="default",
        worker_id=worker_id,
        token=token(token_no),
        attempt=attempt,
        max_attempts=max_attempts,
        claimed_at=at(seconds_left - lease_seconds),
        lease_expires_at=at(seconds_left),
        lease_seconds=lease_seconds,
        reclaimed_from=reclaimed_from,
    )


DEAD_ERROR = (
    "card_declined: Your card was declined. (HTTP 402 from the Stripe endpoint, "
    "request req_8a7b6c5d4e3f; decline_code insufficient_funds)"
)
"""A dead job's error longer than any column, to show where the panels cut it."""

EMAIL_SCOPE = "this process's SMTP sink (not shared with other processes)"
CHARGE_SCOPE = "this process's Stripe endpoint (not shared with other processes)"


def main_board() -> BoardSnapshot:
    """The main fixture: four workers (one paused, one remote, one crashed here), nine
    claims at every lease band including one EXPIRED and one reclaimed, a failures log
    with a rejected completion and a cancel, a duplicate email, a replayed charge, two dead
    jobs with long errors, a paused queue, a schedule and trends."""
    workers = (
        worker(
            "opsbox-1", in_flight=4, renewals_ok=1287, heartbeat_age=2, pool_in_use=6, embedded=True
        ),
        worker(
            "opsbox-2",
            state="paused",
            in_flight=2,
            renewals_ok=311,
            renewals_failed=2,
            heartbeat_age=27,
            pool_in_use=10,
            pool_waiting=1,
        ),
        worker(
            "batch-07",
            host="batch-07.int",
            in_flight=3,
            renewals_ok=5120,
            heartbeat_age=4,
            embedded=False,
        ),
        worker("opsbox-3", state="stopped", renewals_ok=42, heartbeat_age=400, pool_in_use=0),
    )
    claims = (
        claim(1041, "email", "opsbox-1", seconds_left=52.4, token_no=0x1A2B3C4D),
        claim(1049, "sleep", "opsbox-1", seconds_left=58.7, token_no=0x1B2C3D4E),
        claim(
            1048, "billing", "batch-07", seconds_left=48.0, token_no=0x1C2D3E4F, attempt=2,
            reclaimed_from="opsbox-3",
        ),
        claim(1042, "billing", "opsbox-1", seconds_left=41.0, token_no=0x2B3C4D5E),
        claim(1047, "email", "opsbox-1", seconds_left=33.3, token_no=0x2C3D4E5F),
        claim(1043, "sleep", "batch-07", seconds_left=25.5, token_no=0x3C4D5E6F, attempt=2),
        claim(1044, "email", "batch-07", seconds_left=13.9, token_no=0x4D5E6F70),
        claim(1045, "billing", "opsbox-2", seconds_left=6.2, token_no=0x5E6F7081, attempt=5),
        claim(1046, "email", "opsbox-2", seconds_left=-3.0, token_no=0x6F708192),
    )
    claims = tuple(sorted(claims, key=lambda c: (c.lease_expires_at, c.job_id)))
    failures = (
        FailureRow(
            at(-95),
            1038,
            "opsbox-2",
            token(0x0A0B0C0D),
            "renewal_failed",
            "lease expired before renewal",
        ),
        FailureRow(at(-95), 1038, "opsbox-2", token(0x0A0B0C0D), "lease_lost", "handler cancelled"),
        FailureRow(
            at(-41),
            1033,
            "opsbox-2",
            token(0x0B0C0D0E),
            "completion_rejected",
            "stale token: job 1033 now held by batch-07",
        ),
        # Only what LIST_TROUBLE returns: lease troubles (issue 26: cancelled and dead lines
        # here showed what the real log never does).
    )
    effects = Effects(
        emails=(
            EmailSeen(at(-300), "<job-1031@taskboard>", "m***@example.com", "Receipt", 1),
            EmailSeen(at(-120), "<job-1033@taskboard>", "m***@example.com", "Welcome", 2),
            EmailSeen(at(-30), "<job-1036@taskboard>", "j***@example.org", "Reset", 1),
        ),
        charges=(
            ChargeSeen(at(-200), 1032, "pi_3Q0aa11Bb22Cc33", 1200, "eur", 0),
            ChargeSeen(at(-90), 1035, "pi_3Q0dd44Ee55Ff66", 4999, "usd", 1),
        ),
        smtp_target="smtp://127.0.0.1:8025",
        stripe_target="stripe: local endpoint http://127.0.0.1:12111",
        email_scope=EMAIL_SCOPE,
        charge_scope=CHARGE_SCOPE,
    )
    dead = (
        DeadRow(17, "billing", 5, DEAD_ERROR, at(-12)),
        DeadRow(
            9, "email", 5,
            "SMTP 550 5.1.1 <old@example.org>: recipient address rejected: user unknown",
            at(-3700),
        ),
    )
    return BoardSnapshot(
        db_now=DB_NOW,
        database=DATABASE,
        mode="embedded",
        workers=workers,
        claims=claims,
        claims_total=len(claims),
        failures=failures,
        dead=dead,
        counts=JobCounts(
            pending=12, scheduled=3, claimed=8, expired=1, completed=1287, dead=2, cancelled=1
        ),
        paused_queues=(PausedQueueRow("reports", at(-300), "month-end freeze", 14),),
        schedules=(
            ScheduleRow("nightly-digest", "0 3 * * *", "email", "default", at(-23000), at(63400)),
        ),
        trends=sample_trends(),
        effects=effects,
    )


def sample_trends() -> Trends:
    """Twelve buckets of five seconds with a lost lease and a slow renewal in them."""
    return Trends(
        step=5.0,
        completed_per_s=(3.2, 3.4, 3.0, 2.8, 3.6, 4.0, 3.8, 1.2, 0.8, 2.6, 3.4, 3.6),
        pickup_p50=(0.02, 0.02, 0.03, 0.02, 0.02, 0.05, 0.4, 1.1, 0.3, 0.04, 0.02, 0.02),
        renewal_lateness=(0.01, 0.01, 0.02, 0.01, None, 0.01, 0.3, 0.01, 0.01, 0.02, 0.01, 0.01),
        lost=(0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0),
    )


def empty_board() -> BoardSnapshot:
    """A connected board with no workers at all (nothing to select)."""
    return BoardSnapshot(db_now=DB_NOW, database=DATABASE, mode="attached")


def down(snapshot: BoardSnapshot, error: str = "connection refused") -> BoardSnapshot:
    """The same board as a failed refresh reports it: connected=False with the error."""
    return replace(snapshot, connected=False, error=error)


# --------------------------------------------------------------------------- demo

DEMO_EMAIL_JOB = 101
"""The id `FixedBoard` hands out for the demo's first enqueue (the email job)."""

DEMO_BILLING_JOB = 102
"""The id of the demo's billing job."""


# --------------------------------------------------------------------------- control


@dataclass
class FixedBoard:
    """A `BoardControl` serving `snapshot` as is and recording every command.

    Set `refuse[name]` to make command `name` raise `CommandRefused(reason)`, or
    `fail[name]` to make it raise that exception, to exercise the UI's error paths.
    """

    snapshot: BoardSnapshot = field(default_factory=main_board)
    """What `refresh()` returns; tests replace it to move the story on."""
    embedded: tuple[str, ...] = ()
    """Ids for `embedded_worker_ids()`; empty means the snapshot's embedded workers."""
    next_job_id: int = DEMO_EMAIL_JOB
    """Id returned by the next `enqueue_sample`."""
    commands: list[tuple[str, object]] = field(default_factory=list)
    """Commands received, in order, e.g. `("pause", "opsbox-1")`."""
    refuse: dict[str, str] = field(default_factory=dict)
    """Command name -> reason for `CommandRefused`."""
    fail: dict[str, Exception] = field(default_factory=dict)
    """Command name -> exception to raise."""
    refreshes: int = 0
    """How many times `refresh()` was called."""
    added: int = 0
    """Workers added so far (their ids are made up from this count)."""
    link: LinkHealth = field(default_factory=lambda: LinkHealth(last_answer_age=0.2))
    """What `health()` returns; tests set it to a link that waits or failed."""
    resets: int = 0
    """How many times `reset_demo()` was called."""

    async def refresh(self) -> BoardSnapshot:
        """Return the current fixed snapshot."""
        self.refreshes += 1
        return self.snapshot

    def embedded_worker_ids(self) -> list[str]:
        """Embedded worker ids: the configured ones, else those the snapshot marks."""
        if self.embedded:
            return list(self.embedded)
        return [w.id for w in self.snapshot.workers if w.embedded]

    def started_here(self) -> frozenset[str]:
        """Workers this dashboard started: the snapshot's `embedded` ones."""
        return frozenset(w.id for w in self.snapshot.workers if w.embedded)

    def health(self) -> LinkHealth:
        """The configured link health."""
        return self.link

    def _record(self, name: str, argument: object) -> None:
        if name in self.refuse:
            raise CommandRefused(self.refuse[name])
        if name in self.fail:
            raise self.fail[name]
        self.commands.append((name, argument))

    def sent(self, name: str) -> list[object]:
        """Arguments of every `name` command received."""
        return [argument for command, argument in self.commands if command == name]

    async def pause(self, worker_id: str) -> None:
        """Record a pause."""
        self._record("pause", worker_id)

    async def resume(self, worker_id: str) -> None:
        """Record a resume."""
        self._record("resume", worker_id)

    async def drain(self, worker_id: str) -> None:
        """Record a drain."""
        self._record("drain", worker_id)

    async def add_worker(self) -> str:
        """Record an added worker; returns a made-up id."""
        self.added += 1
        worker_id = f"opsbox-{10 + self.added}"
        self._record("add_worker", worker_id)
        return worker_id

    async def crash(self, worker_id: str) -> None:
        """Record a crash."""
        self._record("crash", worker_id)

    async def enqueue_sample(self, kind: str) -> int:
        """Record an enqueue; returns the next job id."""
        self._record("enqueue_sample", kind)
        job_id = self.next_job_id
        self.next_job_id += 1
        return job_id

    def enqueue_kinds(self) -> tuple[KindOffer, ...]:
        """The built-in kinds, as a dashboard without --app offers them."""
        return (KindOffer("billing", False, {"customer": "cus_maya", "amount": 1999}, None),
                KindOffer("email", False, {"to": "maya@example.com"}, None),
                KindOffer("noop", False, {}, None),
                KindOffer("sleep", False, {"seconds": 5.0}, "seconds: is required"))

    def payload_problem(self, kind: str, payload: object) -> str | None:
        """A sleep job needs its seconds; every other payload object is taken."""
        if kind == "sleep" and isinstance(payload, dict) and "seconds" not in payload:
            return "seconds: is required"
        return None

    async def enqueue_job(self, kind: str, payload: dict[str, object]) -> int:
        """Record an enqueue with its payload; returns the next job id."""
        self._record("enqueue_job", (kind, payload))
        job_id = self.next_job_id
        self.next_job_id += 1
        return job_id

    async def retry(self, job_id: int) -> None:
        """Record a retry."""
        self._record("retry", job_id)

    async def cancel_job(self, job_id: int) -> None:
        """Record a cancel."""
        self._record("cancel_job", job_id)

    async def pause_queue(self, queue: str, reason: str | None = None) -> None:
        """Record a queue pause and its reason."""
        self._record("pause_queue", (queue, reason))

    async def resume_queue(self, queue: str) -> None:
        """Record a queue resume."""
        self._record("resume_queue", queue)

    async def job_detail(self, job_id: int) -> JobDetail:
        """A made-up detail of `job_id`: one attempt that ended with the dead job's error."""
        self._record("job_detail", job_id)
        return JobDetail(
            id=job_id, kind="billing", queue="default", state="dead",
            payload={"customer": "cus_maya", "amount": 1999, "api_key": "***"},
            attempts_used=1, max_attempts=5, run_at=at(-60), created_at=at(-60),
            finished_at=at(-12), last_error=DEAD_ERROR, unique_key=None, timeout_seconds=None,
            holder=None, lease_expires_at=None,
            attempts=(
                AttemptRow(1, token(job_id), "opsbox-1", at(-59), at(-12), None, None, "dead",
                           DEAD_ERROR, 0.02, 47.0, 13.0),
            ),
        )

    async def list_jobs(self, state: str, needle: str | None = None) -> list[JobListRow]:
        """No jobs."""
        self._record("list_jobs", state)
        return []

    async def lease_advice(self) -> list[KindAdvice]:
        """No advice."""
        self._record("lease_advice", None)
        return []

    async def preview_all(self, action: str, state: str, needle: str | None) -> Preview:
        """Nothing matches."""
        self._record("preview_all", (action, state, needle))
        return Preview(count=0, first_ids=())

    async def act_on_all(self, action: str, state: str, needle: str | None) -> BulkResult:
        """Record a bulk command; it acts on nothing."""
        self._record("act_on_all", (action, state, needle))
        return BulkResult()

    async def queue_health(self) -> HealthReport:
        """A fixed reading: a report session has held a snapshot for 20 minutes."""
        self._record("queue_health", None)
        return sample_health()

    async def reset_demo(self, workers: int = 2) -> None:
        """Record a demo reset."""
        self._record("reset_demo", workers)
        self.resets += 1


def sample_health() -> HealthReport:
    """A red reading: `nightly-report` (pid 4242) has held a snapshot for 20 minutes and
    taskboard_jobs carries 180,000 dead row versions."""
    return grade(
        HealthReport(
            level="ok", advice="",
            tables=(
                TableHealth("taskboard_jobs", 120_000, 180_000, at(-1500), at(-1500)),
                TableHealth("taskboard_attempts", 400_000, 9_000, at(-1500), at(-1500)),
            ),
            holder=XminHolder(4242, "nightly-report", "reporting", "idle in transaction",
                              at(-1200), at(-1190), 5_000_000, 1200.0, "taskboard"),
            prepared=None, slots=(), claim_mean_ms=None, claim_calls=0,
            claim_note="claim time: not measured, pg_stat_statements is not installed in "
            "this database", sees_all_sessions=True,
        ),
        Thresholds(),
    )
