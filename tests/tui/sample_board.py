"""A fixed board for snapshot tests, screenshots and UI work without a database.

`FixedBoard` implements `BoardControl` by serving a hand-built `BoardSnapshot` and
recording the commands it receives. Every timestamp is derived from `DB_NOW`, a frozen
instant, so a screen rendered from these fixtures is the same on every run. No SQL here:
this module only builds the snapshot objects the engine would otherwise produce.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from taskboard.core.board import (
    BoardSnapshot,
    ChargeSeen,
    ClaimRow,
    DeadRow,
    Effects,
    EmailSeen,
    FailureRow,
    JobCounts,
    WorkerRow,
)
from taskboard.core.control import CommandRefused

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
) -> WorkerRow:
    """A worker row with a consistent pool: max = capacity + 2 reserved."""
    pool_max = capacity + 2
    in_use = in_flight + 1 if pool_in_use is None else pool_in_use
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
    )


def main_board() -> BoardSnapshot:
    """The main fixture: three workers (one paused, one remote), six claims at every lease
    band including one EXPIRED, a failures log with a rejected completion, a duplicate
    email, a replayed charge and a dead job."""
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
            pool_in_use=9,
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
    )
    claims = (
        claim(1041, "email", "opsbox-1", seconds_left=52.4, token_no=0x1A2B3C4D),
        claim(1042, "billing", "opsbox-1", seconds_left=41.0, token_no=0x2B3C4D5E),
        claim(1043, "sleep", "batch-07", seconds_left=25.5, token_no=0x3C4D5E6F, attempt=2),
        claim(1044, "email", "batch-07", seconds_left=13.9, token_no=0x4D5E6F70),
        claim(1045, "billing", "opsbox-2", seconds_left=6.2, token_no=0x5E6F7081, attempt=5),
        claim(1046, "email", "opsbox-2", seconds_left=-3.0, token_no=0x6F708192),
    )
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
        FailureRow(
            at(-12),
            17,
            "batch-07",
            token(0x0C0D0E0F),
            "dead",
            "card_declined: Your card was declined.",
        ),
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
    )
    dead = (DeadRow(17, "billing", 5, "card_declined: Your card was declined.", at(-12)),)
    return BoardSnapshot(
        db_now=DB_NOW,
        database=DATABASE,
        mode="embedded",
        workers=workers,
        claims=claims,
        claims_total=9,
        failures=failures,
        dead=dead,
        counts=JobCounts(pending=12, scheduled=3, claimed=9, expired=1, completed=1287, dead=1),
        effects=effects,
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

_A = "opsbox-1"
_B = "opsbox-2"
_TOKEN_A = 0xA1A1A1A1
_TOKEN_B = 0xB2B2B2B2


def _demo(
    *,
    a_state: str = "running",
    claims: tuple[ClaimRow, ...] = (),
    emails: int = 0,
    replays: int = 0,
    rejected: bool = False,
    completed: int = 0,
    a_failed: int = 0,
    a_stalled: int = 0,
) -> BoardSnapshot:
    # A paused worker's handlers still hold their connections after losing the leases.
    in_flight_a = a_stalled or sum(1 for c in claims if c.worker_id == _A)
    in_flight_b = sum(1 for c in claims if c.worker_id == _B)
    workers = (
        worker(
            _A,
            state=a_state,
            in_flight=in_flight_a,
            lease_seconds=DEMO_LEASE,
            renewals_ok=14,
            renewals_failed=a_failed,
            heartbeat_age=9 if a_state == "paused" else 1,
        ),
        worker(_B, in_flight=in_flight_b, lease_seconds=DEMO_LEASE, renewals_ok=9),
    )
    email_rows: tuple[EmailSeen, ...] = ()
    if emails:
        email_rows = (
            EmailSeen(
                at(-6),
                f"<job-{DEMO_EMAIL_JOB}@taskboard>",
                "m***@example.com",
                "Your receipt",
                emails,
            ),
        )
    charge_rows: tuple[ChargeSeen, ...] = ()
    if emails:
        charge_rows = (
            ChargeSeen(at(-6), DEMO_BILLING_JOB, "pi_3QdemoA1b2C3", 1200, "eur", replays),
        )
    failures: tuple[FailureRow, ...] = ()
    if rejected:
        failures = (
            FailureRow(
                at(-2),
                DEMO_EMAIL_JOB,
                _A,
                token(_TOKEN_A),
                "completion_rejected",
                "stale token: 0 rows changed",
            ),
            FailureRow(
                at(-2),
                DEMO_BILLING_JOB,
                _A,
                token(_TOKEN_A + 1),
                "completion_rejected",
                "stale token: 0 rows changed",
            ),
        )
    return BoardSnapshot(
        db_now=DB_NOW,
        database="postgresql://taskboard:***@127.0.0.1:54329/taskboard",
        mode="demo",
        workers=workers,
        claims=claims,
        claims_total=len(claims),
        failures=failures,
        counts=JobCounts(
            claimed=len(claims),
            expired=sum(1 for c in claims if c.seconds_left(DB_NOW) <= 0),
            completed=completed,
        ),
        effects=Effects(
            emails=email_rows,
            charges=charge_rows,
            smtp_target="smtp://127.0.0.1:8025",
            stripe_target="stripe: local endpoint http://127.0.0.1:12111",
        ),
    )


def _held(worker_id: str, token_no: int, seconds_left: float, attempt: int) -> tuple[ClaimRow, ...]:
    return (
        claim(
            DEMO_EMAIL_JOB,
            "email",
            worker_id,
            seconds_left=seconds_left,
            token_no=token_no,
            attempt=attempt,
            lease_seconds=DEMO_LEASE,
        ),
        claim(
            DEMO_BILLING_JOB,
            "billing",
            worker_id,
            seconds_left=seconds_left,
            token_no=token_no + 1,
            attempt=attempt,
            lease_seconds=DEMO_LEASE,
        ),
    )


@dataclass(frozen=True)
class DemoBeat:
    """One step of the scripted demo board: the board when `n` is pressed, and after."""

    before: BoardSnapshot
    after: BoardSnapshot


def demo_beats() -> list[DemoBeat]:
    """Boards for the training scenario's five steps, following the article's timeline.

    Beat k's `before` board satisfies step k's precondition (e.g. step 3 needs the email
    job reclaimed by another worker); its `after` board is what the screen shows once the
    step ran.
    """
    idle = _demo()
    claimed_by_a = _demo(claims=_held(_A, _TOKEN_A, 8.4, 1), emails=1)
    a_paused = _demo(a_state="paused", claims=_held(_A, _TOKEN_A, 2.1, 1), emails=1)
    reclaimed = _demo(
        a_state="paused", claims=_held(_B, _TOKEN_B, 9.2, 2), emails=2, replays=1, a_stalled=2
    )
    rejected = _demo(
        claims=_held(_B, _TOKEN_B, 6.0, 2), emails=2, replays=1, rejected=True, a_failed=2
    )
    done = _demo(emails=2, replays=1, rejected=True, completed=2, a_failed=2)
    return [
        DemoBeat(idle, claimed_by_a),
        DemoBeat(claimed_by_a, a_paused),
        DemoBeat(reclaimed, reclaimed),
        DemoBeat(reclaimed, rejected),
        DemoBeat(done, done),
    ]


def demo_waiting_board() -> BoardSnapshot:
    """After step 2: A paused with 2.1 s left, not reclaimed yet (step 3 must wait)."""
    return demo_beats()[1].after


def demo_start_board() -> BoardSnapshot:
    """The board when the scenario starts: two idle embedded workers."""
    return demo_beats()[0].before


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

    async def refresh(self) -> BoardSnapshot:
        """Return the current fixed snapshot."""
        self.refreshes += 1
        return self.snapshot

    def embedded_worker_ids(self) -> list[str]:
        """Embedded worker ids: the configured ones, else those the snapshot marks."""
        if self.embedded:
            return list(self.embedded)
        return [w.id for w in self.snapshot.workers if w.embedded]

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

    async def retry(self, job_id: int) -> None:
        """Record a retry."""
        self._record("retry", job_id)
