"""What the training scenario has learned: the jobs it enqueued and the story's actors, taken
from each job's attempts history (`BoardControl.job_detail`), not from whichever claim row
happened to be on screen when the trainer pressed n.

A claim row shows only the current holder; once B has finished the job the row is gone, and
what A and B did is only in the history. Every fact here is optional until a step learns
it, and the narration says only what is known (never a placeholder).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from taskboard.core.training.kinds import StoryCue
from taskboard.core.view.board import AttemptRow, BoardSnapshot, ClaimRow, EmailCopy, JobDetail


@dataclass(frozen=True)
class Actor:
    """One claim of the email job: the worker that made it, its token, when."""

    worker: str
    token: str
    ordinal: int  # the job's claim number, as the attempts history and email headers count
    claimed_at: datetime

    @property
    def short_token(self) -> str:
        """The token as the claims table shows it."""
        return short_token(self.token)

    @classmethod
    def of(cls, attempt: AttemptRow) -> Actor:
        """The actor of one attempt of the history."""
        return cls(attempt.worker, attempt.token, attempt.ordinal, attempt.claimed_at)


@dataclass
class DemoNotes:
    """What the script learned so far; steps fill it in, the narration reads it."""

    cue: StoryCue = field(default_factory=StoryCue)
    """How far the demo's handlers may go; steps let them on as the story reaches them."""
    email_job: int | None = None
    billing_job: int | None = None
    since: datetime | None = None
    """Database time of the latest fact learned: a board read before it is out of date."""
    stood_aside: list[str] = field(default_factory=list)
    """Idle workers paused while the jobs were enqueued, so that the first one takes them."""
    asides_done: bool = False
    first_worker: str | None = None  # the one left to take the jobs (it plays A)
    a: Actor | None = None
    a_sent: bool = False  # A's copy of the email had reached the sink when A was paused
    back_for_b: list[str] = field(default_factory=list)  # stood aside, resumed to play B
    added_worker: str | None = None  # started to play B: nobody else could reclaim
    b_ready: bool = False
    a_deadline: datetime | None = None
    """When A's lease ran out, as the claims row showed it once A stopped renewing."""
    b: Actor | None = None
    a_resumed: bool = False
    a_stopped: bool = False  # A's worker stopped while paused: it will never come back
    a_back_at: datetime | None = None  # A's attempt's end, stamped when A came back
    a_outcome: str | None = None  # completion_rejected | lease_lost | effect_refused
    b_done_at: datetime | None = None
    b_outcome: str | None = None
    emails: tuple[EmailCopy, ...] = ()
    charges: int | None = None  # distinct charges of the billing job (None: not read)
    replays: int = 0  # idempotent replays the Stripe endpoint served for them

    @property
    def fence_outcome(self) -> str | None:
        """How the fence stopped A once it came back: "completion_rejected" (its UPDATE
        changed zero rows) or "lease_lost" (its renewal told it first); None before."""
        return self.a_outcome if self.a_back_at is not None else None

    def see(self, board: BoardSnapshot) -> None:
        """Remember what only the board shows: the deadline of A's lease once A has stopped
        renewing (the history keeps claims and ends, not deadlines)."""
        if self.a is None or self.b is not None:
            return
        claim = claim_of(board, self.email_job)
        if claim is not None and claim.token == self.a.token:
            self.a_deadline = claim.lease_expires_at

    def learned(self, moment: datetime | None) -> None:
        """A fact from the database at `moment`: boards read before it are out of date."""
        if moment is not None and (self.since is None or moment > self.since):
            self.since = moment

    def copies_by(self, actor: Actor | None) -> list[EmailCopy]:
        """The email copies the sink received from `actor`'s claim."""
        if actor is None:
            return []
        return [c for c in self.emails if c.attempt == actor.ordinal]

    def learn_charges(self, detail: JobDetail) -> None:
        """Distinct charges of the billing job, and the replays served for them."""
        self.charges = len({c.payment_intent for c in detail.charges})
        self.replays = sum(c.replays or 0 for c in detail.charges)


def short_token(token: str) -> str:
    """First 8 hex digits, as `ClaimRow.short_token` shows a token."""
    return token.replace("-", "")[:8]


def clock(moment: datetime) -> str:
    """Database time to a tenth of a second: B's claim and A's return can be a second apart."""
    return moment.strftime("%H:%M:%S.%f")[:10]


def seconds(a: datetime, b: datetime) -> str:
    """`b - a` as narrated, e.g. "3.2s"."""
    return f"{(b - a).total_seconds():.1f}s"


def attempt_of(detail: JobDetail, token: str) -> AttemptRow | None:
    """The attempt of the history that held `token`."""
    return next((a for a in detail.attempts if a.token == token), None)


def holder_attempt(detail: JobDetail) -> AttemptRow | None:
    """The attempt that holds the job now, if a worker does."""
    if detail.holder is None:
        return None
    running = [a for a in detail.attempts if a.outcome is None and a.worker == detail.holder]
    return max(running, key=lambda a: a.ordinal, default=None)


def next_attempt(detail: JobDetail, after: Actor) -> AttemptRow | None:
    """The claim that came after `after`'s: the reclaim, once there is one."""
    later = [a for a in detail.attempts if a.ordinal > after.ordinal]
    return min(later, key=lambda a: a.ordinal, default=None)


def came_back(attempt: AttemptRow) -> bool:
    """Whether the stale worker itself ended its attempt. A reclaim closes the old attempt
    as lease_lost with `ended_at = superseded_at` (one statement, one now()); the worker,
    when it comes back, stamps its own end: a rejected completion or a lease it gave up."""
    if attempt.outcome == "completion_rejected":
        return True
    if attempt.ended_at is None:
        return False
    return attempt.superseded_at is None or attempt.ended_at > attempt.superseded_at


def claim_of(board: BoardSnapshot, job_id: int | None) -> ClaimRow | None:
    """The claim row of `job_id`, if the board lists one."""
    return next((c for c in board.claims if c.job_id == job_id), None)


def all_listed(board: BoardSnapshot) -> bool:
    """Whether the board lists every claim (a job missing from it is not claimed)."""
    return board.claims_total <= len(board.claims)


def newest_email_claim(board: BoardSnapshot) -> ClaimRow | None:
    """The latest email job a worker holds with time left: one the trainer enqueued (e)."""
    emails = [c for c in board.claims if c.kind == "email" and c.seconds_left(board.db_now) > 0]
    return max(emails, key=lambda c: c.job_id, default=None)


def name(worker_id: str | None) -> str:
    """A worker id for the narration (the board writes "?" for a claim without a holder)."""
    return worker_id if worker_id and worker_id != "?" else "another worker"
