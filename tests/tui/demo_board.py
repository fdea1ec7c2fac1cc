"""The training story as a fixed world, for the demo's tests without a database.

`DemoWorld` is the article's timeline as dated events (A claims, sends, stalls; its lease
runs out; B reclaims, sends again; A comes back and is fenced; B completes). `DemoBoard`
serves the board and each job's detail (attempts history, email copies, charges) as they
stand at `now`, a time the test moves; commands are recorded as `FixedBoard` records them.
The fast world has B complete after A came back; the slow one, before A was resumed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from taskboard.core.view.board import (
    AttemptRow,
    BoardSnapshot,
    ChargeRecord,
    ChargeSeen,
    ClaimRow,
    Effects,
    EmailCopy,
    EmailSeen,
    FailureRow,
    JobCounts,
    JobDetail,
    WorkerRow,
)
from taskboard.core.view.control import CommandRefused

from tests.tui.sample_board import DEMO_LEASE, FixedBoard, at, token, worker

EMAIL = 101
BILLING = 102
A = "worker-a"
B = "worker-b"
TOKEN_A = token(0xA1A1A1A1)
TOKEN_B = token(0xB2B2B2B2)
BILLING_A = token(0xA1A1A1A2)
BILLING_B = token(0xB2B2B2B3)


@dataclass(frozen=True)
class DemoWorld:
    """When each event of the story happens, in seconds from `DB_NOW` (negative: before)."""

    b_aside: float = -31.0  # worker-b paused while the jobs are enqueued
    created: float = -30.0
    a_claim: float = -29.9
    a_sent: float = -29.8
    a_renewed: float = -29.0  # A's last renewal: its lease then runs out 10 s later
    a_paused: float = -28.5
    b_back: float = -18.55  # worker-b resumed to play B, once A's lease has run out
    b_claim: float = -18.4
    b_sent: float = -18.3
    a_resumed: float = -12.0
    a_back: float = -11.9
    b_done: float = -8.3
    a_fence: str = "completion_rejected"  # or lease_lost: A's renewal told it first
    a_done: float = 99.0  # A completes the jobs itself (when the trainer stalls too late)

    @property
    def a_expires(self) -> float:
        """When A's lease runs out (no renewal after the pause)."""
        return self.a_renewed + DEMO_LEASE


FAST = DemoWorld()
SLOW = replace(FAST, b_done=-14.0)
"""B reclaims and completes while A is still paused; the trainer resumes A afterwards."""

# Moments a test sets `DemoBoard.now` to, one per beat of the story.
START = -35.0
CLAIMED = -29.5
PAUSED = -25.0  # A paused, its lease running down (6 s left)
EXPIRED = -18.6  # A's lease ran out, nobody reclaimed yet
RECLAIMED = -17.0
BACK = -11.0  # A came back (fast: B still holds the job)
DONE = 0.0
DEMO_MOMENTS = (START, CLAIMED, EXPIRED, RECLAIMED, RECLAIMED, BACK, DONE)
"""Where `DemoBoard.now` stands when n is pressed for each step, pressed as soon as allowed."""


def _claims(world: DemoWorld, t: float) -> tuple[ClaimRow, ...]:
    rows = []
    for job, kind, tok_a, tok_b in ((EMAIL, "email", TOKEN_A, TOKEN_B),
                                    (BILLING, "billing", BILLING_A, BILLING_B)):
        if world.a_claim <= t < min(world.b_claim, world.a_done):
            expires = world.a_expires if t >= world.a_renewed else world.a_claim + DEMO_LEASE
            rows.append(_claim(job, kind, A, tok_a, 1, world.a_claim, expires, None))
        elif world.b_claim <= t < world.b_done:
            expires = world.b_claim + DEMO_LEASE
            rows.append(_claim(job, kind, B, tok_b, 2, world.b_claim, expires, A))
    return tuple(rows)


def _claim(
    job: int, kind: str, who: str, tok: str, attempt: int, claimed: float, expires: float,
    reclaimed_from: str | None,
) -> ClaimRow:
    return ClaimRow(job, kind, "default", who, tok, attempt, 5, at(claimed), at(expires),
                    DEMO_LEASE, reclaimed_from)


def demo_board_at(world: DemoWorld, t: float, *, with_b: bool = True) -> BoardSnapshot:
    """The board as the dashboard reads it at `t`."""
    a_state = "paused" if world.a_paused <= t < world.a_resumed else "running"
    b_state = "paused" if world.b_aside <= t < world.b_back else "running"
    a_holds = 2 if world.a_claim <= t < world.a_back else 0
    b_holds = 2 if world.b_claim <= t < world.b_done else 0
    workers: tuple[WorkerRow, ...] = (
        worker(A, state=a_state, in_flight=a_holds, lease_seconds=DEMO_LEASE),
    )
    if with_b:
        workers += (worker(B, state=b_state, in_flight=b_holds, lease_seconds=DEMO_LEASE),)
    claims = _claims(world, t)
    failures: list[FailureRow] = []
    for job, tok in ((EMAIL, TOKEN_A), (BILLING, BILLING_A)):
        if t >= world.a_back:
            failures.append(FailureRow(at(world.a_back), job, A, tok, world.a_fence, "stale"))
        elif t >= world.b_claim:
            failures.append(FailureRow(at(world.b_claim), job, A, tok, "lease_lost"))
    copies = _copies(world, t)
    emails: tuple[EmailSeen, ...] = ()
    if copies:
        emails = (EmailSeen(copies[0].at, copies[0].message_id, "m***@example.com",
                            "Your receipt", len(copies)),)
    charges: tuple[ChargeSeen, ...] = ()
    if t >= world.a_sent:
        replays = 1 if t >= world.b_sent else 0
        charges = (ChargeSeen(at(world.a_sent), BILLING, "pi_demo", 1999, "usd", replays),)
    pending = 2 if world.created <= t < world.a_claim else 0
    return BoardSnapshot(
        db_now=at(t),
        database="postgresql://taskboard:***@127.0.0.1:54329/taskboard_demo",
        mode="demo",
        workers=workers,
        claims=claims,
        claims_total=len(claims),
        failures=tuple(reversed(failures)),
        counts=JobCounts(pending=pending, claimed=len(claims),
                         expired=sum(1 for c in claims if c.seconds_left(at(t)) <= 0),
                         completed=2 if t >= world.b_done else 0),
        effects=Effects(
            emails=emails,
            charges=charges,
            smtp_target="smtp://127.0.0.1:8025",
            stripe_target="stripe: local endpoint http://127.0.0.1:12111",
        ),
    )


def _copies(world: DemoWorld, t: float) -> tuple[EmailCopy, ...]:
    sent = [(world.a_sent, 1, A), (world.b_sent, 2, B)]
    return tuple(
        EmailCopy(at(moment), f"<job-{EMAIL}@taskboard>", ordinal, who)
        for moment, ordinal, who in sent
        if t >= moment
    )


def demo_detail_at(world: DemoWorld, job_id: int, t: float) -> JobDetail:
    """One job of the story, as `BoardControl.job_detail` reads it at `t`."""
    tok_a, tok_b = (TOKEN_A, TOKEN_B) if job_id == EMAIL else (BILLING_A, BILLING_B)
    attempts = []
    if t >= world.a_claim:
        a_end: datetime | None = None
        a_outcome: str | None = None
        superseded = at(world.b_claim) if t >= world.b_claim else None
        if t >= world.a_done:
            a_end, a_outcome = at(world.a_done), "completed"
        elif t >= world.a_back:
            a_end, a_outcome = at(world.a_back), world.a_fence
        elif superseded is not None:
            a_end, a_outcome = superseded, "lease_lost"
        attempts.append(AttemptRow(1, tok_a, A, at(world.a_claim), a_end, superseded, None,
                                   a_outcome, None, 0.1, None, None))
    if t >= world.b_claim:
        done = t >= world.b_done
        attempts.append(AttemptRow(2, tok_b, B, at(world.b_claim),
                                   at(world.b_done) if done else None, None, None,
                                   "completed" if done else None, None, 0.0, None, None))
    holder = None
    if world.a_claim <= t < min(world.b_claim, world.a_done):
        holder = A
    elif world.b_claim <= t < world.b_done:
        holder = B
    finished = min(world.b_done, world.a_done)
    state = "pending" if t < world.a_claim else ("completed" if t >= finished else "running")
    charges: tuple[ChargeRecord, ...] = ()
    if job_id == BILLING and t >= world.a_sent:
        charges = (ChargeRecord("pi_demo", 1999, "usd", 1 if t >= world.b_sent else 0,
                                t >= world.b_done, at(world.a_sent)),)
    return JobDetail(
        id=job_id,
        kind="email" if job_id == EMAIL else "billing",
        queue="default",
        state=state,
        payload={},
        attempts_used=len(attempts),
        max_attempts=5,
        run_at=at(world.created),
        created_at=at(world.created),
        finished_at=at(finished) if state == "completed" else None,
        last_error=None,
        unique_key=None,
        timeout_seconds=None,
        holder=holder,
        lease_expires_at=None,
        attempts=tuple(attempts),
        emails=_copies(world, t) if job_id == EMAIL else (),
        charges=charges,
    )


@dataclass
class DemoBoard(FixedBoard):
    """A `BoardControl` over `DemoWorld` at `now`; `with_b=False`: worker-a alone."""

    world: DemoWorld = FAST
    now: float = START
    with_b: bool = True
    details_read: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.snapshot = self.board()

    def board(self) -> BoardSnapshot:
        """The board at `now`."""
        return demo_board_at(self.world, self.now, with_b=self.with_b)

    def at(self, t: float) -> BoardSnapshot:
        """Move the world to `t`; returns the board then."""
        self.now = t
        self.snapshot = self.board()
        return self.snapshot

    async def add_worker(self) -> str:
        """Record an added worker: worker-b joins the world."""
        self._record("add_worker", B)
        self.with_b = True
        return B

    async def job_detail(self, job_id: int) -> JobDetail:
        """The job's detail at `now`."""
        self.details_read.append(job_id)
        if "job_detail" in self.refuse:
            raise CommandRefused(self.refuse["job_detail"])
        return demo_detail_at(self.world, job_id, self.now)
