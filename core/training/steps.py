"""The steps of the article's timeline: what each does to the board and what it narrates.

Steps look the actors up in the latest `BoardSnapshot` ("the worker holding the email job")
instead of assuming ids, because the workers' timing is real: when the board has not
reached the state a step needs yet, the step raises `DemoWaiting` saying what it waits for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from taskboard.core.board import BoardSnapshot, ClaimRow, WorkerRow
from taskboard.core.control import BoardControl


class DemoWaiting(Exception):
    """The board has not reached the state a step needs yet; the message says what is awaited."""


@dataclass
class DemoNotes:
    """What the script learned so far: the jobs it enqueued and the actors of the story."""

    email_job: int | None = None
    billing_job: int | None = None
    worker_a: str | None = None
    token_a: str | None = None
    worker_b: str | None = None
    token_b: str | None = None
    attempt_b: int | None = None
    added_worker: str | None = None
    duplicate_emails: int = 0
    charge_replays: int = 0
    fence_outcome: str | None = None
    """What the failures log showed for A: "completion_rejected", "lease_lost" or None."""

    def labels(self) -> dict[str, str]:
        """Values for the narration templates; unknown ones read as "?" rather than None."""

        def text(value: object) -> str:
            return "?" if value is None else str(value)

        return {
            "email_job": text(self.email_job),
            "billing_job": text(self.billing_job),
            "worker_a": text(self.worker_a),
            "token_a": text(self.token_a),
            "worker_b": text(self.worker_b),
            "token_b": text(self.token_b),
            "attempt_b": text(self.attempt_b),
            "added_line": (
                f"(Worker {self.added_worker} was added to play B.) " if self.added_worker else ""
            ),
            "duplicate_seen": (
                "the effects panel flags the DUPLICATE"
                if self.duplicate_emails
                else "watch the effects panel for the DUPLICATE"
            ),
            "email_result": (
                "it did here: see the DUPLICATE"
                if self.duplicate_emails
                else "not this time: A stalled before sending"
            ),
            "fence_result": {
                "completion_rejected": "A tried to complete and the fence rejected it: zero rows",
                "lease_lost": "A's failed renewal told it the lease was lost, so it never "
                "tried to complete",
            }.get(self.fence_outcome or "", "A did not complete the job"),
            "charge_result": (
                f"{self.charge_replays} REPLAYED in the effects panel"
                if self.charge_replays
                else "no replay seen yet"
            ),
        }


StepAction = Callable[[BoardControl, BoardSnapshot | None, DemoNotes], Awaitable[None]]
"""A step's move: may send commands, must raise `DemoWaiting` rather than act too early."""


@dataclass(frozen=True)
class DemoStep:
    """One beat of the story: what to do on entering it, and what to tell the audience."""

    title: str
    narration: str
    """A template filled from `DemoNotes.labels()`, e.g. ``{worker_a}``."""
    action: StepAction | None = None
    """Run when the trainer moves *into* this step; None for the introduction."""


def _claim_of(snapshot: BoardSnapshot, job_id: int | None) -> ClaimRow | None:
    for claim in snapshot.claims:
        if claim.job_id == job_id:
            return claim
    return None


def _worker(snapshot: BoardSnapshot, worker_id: str | None) -> WorkerRow | None:
    for worker in snapshot.workers:
        if worker.id == worker_id:
            return worker
    return None


def _require(snapshot: BoardSnapshot | None) -> BoardSnapshot:
    if snapshot is None:
        raise DemoWaiting("waiting for the first refresh of the board")
    if not snapshot.connected:
        raise DemoWaiting("waiting for the database to come back")
    return snapshot


def _count_effects(snapshot: BoardSnapshot, notes: DemoNotes) -> None:
    notes.duplicate_emails = snapshot.effects.duplicate_emails
    outcomes = {
        failure.outcome
        for failure in snapshot.failures
        if failure.job_id == notes.email_job and failure.worker_id == notes.worker_a
    }
    # A rejected completion is the article's ending; a lost lease means A learned of the
    # reclaim from its renewal first and never sent the UPDATE at all.
    for outcome in ("completion_rejected", "lease_lost", "renewal_failed"):
        if outcome in outcomes:
            notes.fence_outcome = "lease_lost" if outcome == "renewal_failed" else outcome
            break
    notes.charge_replays = sum(
        charge.replays
        for charge in snapshot.effects.charges
        if notes.billing_job is None or charge.job_id in (None, notes.billing_job)
    )


async def _enqueue_jobs(
    control: BoardControl, snapshot: BoardSnapshot | None, notes: DemoNotes
) -> None:
    _require(snapshot)
    # Billing rides along so the last step can contrast an unfenceable send (SMTP) with
    # an idempotent one (Stripe): if the same worker holds both, both get reclaimed.
    notes.email_job = await control.enqueue_sample("email")
    notes.billing_job = await control.enqueue_sample("billing")


async def _stall_holder(
    control: BoardControl, snapshot: BoardSnapshot | None, notes: DemoNotes
) -> None:
    board = _require(snapshot)
    claim = _claim_of(board, notes.email_job) or _newest_email_claim(board)
    if claim is None:
        if _all_listed(board) and board.counts.pending == 0 and board.counts.scheduled == 0:
            # Nothing is waiting and nothing holds it: the job already finished. A handler
            # faster than the trainer cannot be stalled; any other email job will do.
            raise DemoWaiting(
                f"email job #{notes.email_job} already finished before it could be stalled; "
                "press e for another email job, then n while a worker holds it"
            )
        raise DemoWaiting(f"waiting for a worker to claim email job #{notes.email_job}")
    others = [w for w in board.workers if w.id != claim.worker_id and w.state == "running"]
    if not others:
        # Without a second running worker nobody reclaims and the story stops at step 3.
        notes.added_worker = await control.add_worker()
    notes.email_job = claim.job_id
    notes.worker_a = claim.worker_id
    notes.token_a = claim.short_token
    await control.pause(claim.worker_id)


def _newest_email_claim(snapshot: BoardSnapshot) -> ClaimRow | None:
    emails = [
        c for c in snapshot.claims if c.kind == "email" and c.seconds_left(snapshot.db_now) > 0
    ]
    return max(emails, key=lambda c: c.job_id, default=None)


def _all_listed(snapshot: BoardSnapshot) -> bool:
    return snapshot.claims_total <= len(snapshot.claims)


async def _await_reclaim(
    control: BoardControl, snapshot: BoardSnapshot | None, notes: DemoNotes
) -> None:
    board = _require(snapshot)
    claim = _claim_of(board, notes.email_job)
    if claim is None:
        if not _all_listed(board):
            raise DemoWaiting(f"job #{notes.email_job} is not among the claims shown; waiting")
        # An expired lease stays listed until someone reclaims it, so a job that left the
        # claims after A stalled was reclaimed and already finished by another worker.
        notes.worker_b = "another worker"
        _count_effects(board, notes)
        return
    if claim.short_token == notes.token_a:
        left = claim.seconds_left(board.db_now)
        if left > 0:
            raise DemoWaiting(
                f"waiting for A's lease on job #{notes.email_job} to expire ({left:.0f}s left)"
            )
        raise DemoWaiting(
            f"A's lease has expired; waiting for another worker to reclaim job #{notes.email_job}"
        )
    notes.worker_b = claim.worker_id
    notes.token_b = claim.short_token
    notes.attempt_b = claim.attempt
    _count_effects(board, notes)


async def _resume_stale(
    control: BoardControl, snapshot: BoardSnapshot | None, notes: DemoNotes
) -> None:
    board = _require(snapshot)
    if notes.worker_a is None:
        raise DemoWaiting("waiting for worker A to be known")
    worker = _worker(board, notes.worker_a)
    if worker is not None and worker.state != "paused":
        # Someone resumed A by hand already; the story still holds, nothing to send.
        return
    await control.resume(notes.worker_a)


async def _await_completion(
    control: BoardControl, snapshot: BoardSnapshot | None, notes: DemoNotes
) -> None:
    board = _require(snapshot)
    claim = _claim_of(board, notes.email_job)
    if claim is not None:
        left = claim.seconds_left(board.db_now)
        raise DemoWaiting(
            f"waiting for {claim.worker_id} to complete job #{notes.email_job} "
            f"({max(left, 0):.0f}s left on its lease)"
        )
    _count_effects(board, notes)


def article_steps() -> tuple[DemoStep, ...]:
    """The seed article's timeline: claim, stall, reclaim, fenced completion, the boundary."""
    # Each narration fits in about three lines of a 120-column terminal: the board under
    # it is what the audience should be watching.
    return (
        DemoStep(
            "A lease expires when a worker disappears",
            "Worker A claims an email job and stalls; its lease expires; worker B reclaims the "
            "job with a new token; A resumes and its completion is fenced off. Leases are short "
            "in demo mode, so the story takes about a minute. Press n to enqueue an email job "
            "and a billing job.",
        ),
        DemoStep(
            "1. Worker A claims the email job",
            "Enqueued email job #{email_job} and billing job #{billing_job}. A claim writes a "
            "fresh random token and a deadline, the lease; until the deadline other workers "
            "leave the job alone. Watch the Token column and the countdown. Press n to stall "
            "the worker holding the email job.",
            _enqueue_jobs,
        ),
        DemoStep(
            "2. A stalls",
            "Worker A ({worker_a}, token {token_a}) is paused after sending the email, before "
            "completing job #{email_job}. A paused worker stops renewing, so its lease runs "
            "down: watch the countdown reach EXPIRED. {added_line}Press n once another worker "
            "has reclaimed the job.",
            _stall_holder,
        ),
        DemoStep(
            "3. B reclaims with a new token",
            "Worker B ({worker_b}) reclaimed job #{email_job} with token {token_b}, attempt "
            "{attempt_b}; the claim reported A's token {token_a} as the previous one. B runs "
            "the handler again and sends the same email, same Message-ID: {duplicate_seen}. "
            "Press n to resume A.",
            _await_reclaim,
        ),
        DemoStep(
            "4. A resumes: the fence holds",
            "A runs again with token {token_a}, but the row now holds {token_b}. Anything A "
            "writes is fenced: UPDATE jobs SET completed_at = now() WHERE id = $1 AND "
            "lease_token = $2 with $2 = {token_a} changes zero rows, and zero rows means A no "
            "longer owns the job and must not report it done. Watch the failures log. Press n "
            "once B has completed.",
            _resume_stale,
        ),
        DemoStep(
            "5. B completes: the boundary of the fence",
            "B completed job #{email_job}; {fence_result}. But SMTP cannot check a lease token: "
            "the email may go out twice ({email_result}); its stable Message-ID lets receivers "
            "de-duplicate. Billing is charged once: the Idempotency-Key comes from the job id, "
            "not the token, so a reclaimed billing job replays the first charge "
            "({charge_result}).",
            _await_completion,
        ),
    )
