"""The live status under the narration: what the next step waits for, or that n will act,
recomputed from every board the dashboard reads (no commands, no database reads).

A status is about the board it was computed from, so a wait that the board shows over (A's
lease ran out, B reclaimed the job) is never left on screen: the next refresh replaces it.
A board read before the script's latest fact is older than what the script knows, and
changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from taskboard.core.training.notes import (
    DemoNotes,
    all_listed,
    claim_of,
    clock,
    name,
    newest_email_claim,
)
from taskboard.core.view.board import BoardSnapshot, ClaimRow


@dataclass(frozen=True)
class Watch:
    """A status line and whether it says that the next `n` will act."""

    status: str
    ready: bool = False


Awaits = Callable[[DemoNotes, BoardSnapshot], Watch]
"""What a step needs from the board before it can run, as the status line tells it."""


def out_of_date(notes: DemoNotes, board: BoardSnapshot) -> bool:
    """Whether `board` was read before the script's latest fact (it would tell the past)."""
    return notes.since is not None and board.db_now < notes.since


def _left(claim: ClaimRow, board: BoardSnapshot) -> str:
    # Rounded up, as a countdown reads: "0s" would claim a lease that has not run out yet.
    return f"{max(math.ceil(claim.seconds_left(board.db_now)), 0)}s"


def before_stall(notes: DemoNotes, board: BoardSnapshot) -> Watch:
    """Before the stall: a worker must hold the email job."""
    claim = claim_of(board, notes.email_job) or newest_email_claim(board)
    if claim is not None and claim.seconds_left(board.db_now) > 0:
        return Watch(
            f"{name(claim.worker_id)} holds email job #{claim.job_id} "
            f"({_left(claim, board)} left on its lease): n stalls it",
            ready=True,
        )
    counts = board.counts
    if claim is None and all_listed(board) and counts.pending == 0 and counts.scheduled == 0:
        return Watch(
            f"email job #{notes.email_job} finished before the stall: e enqueues another, then n"
        )
    # Not necessarily the script's job: after e, another email job waits for a worker.
    return Watch("waiting for a worker to claim an email job")


def before_b(notes: DemoNotes, board: BoardSnapshot) -> Watch:
    """Before B steps in: A's lease must have run out (or someone reclaimed the job)."""
    job = notes.email_job
    claim = claim_of(board, job)
    if claim is None:
        return _unclaimed(job, board, "n goes on")
    held = _held_by_a(notes, board, claim, "n brings B in")
    return held or Watch(f"{name(claim.worker_id)} reclaimed job #{job} already: n goes on", True)


def before_reclaim(notes: DemoNotes, board: BoardSnapshot) -> Watch:
    """Before B's claim is told: another worker must have taken the job."""
    job = notes.email_job
    claim = claim_of(board, job)
    if claim is None:
        return _unclaimed(job, board, "n shows by whom")
    held = _held_by_a(notes, board, claim, None)
    if held is not None:
        return held
    taken = f" from {claim.reclaimed_from}" if claim.reclaimed_from else ""
    return Watch(
        f"{name(claim.worker_id)} reclaimed job #{job}{taken} at {clock(claim.claimed_at)}: "
        "n tells the story",
        ready=True,
    )


def _unclaimed(job: int | None, board: BoardSnapshot, then: str) -> Watch:
    if not all_listed(board):
        return Watch(f"waiting for job #{job} to show among the claims")
    # A paused A cannot complete: a job that left the claims was reclaimed and finished.
    return Watch(f"job #{job} was reclaimed and is already done: {then}", True)


def _held_by_a(
    notes: DemoNotes, board: BoardSnapshot, claim: ClaimRow, once_expired: str | None
) -> Watch | None:
    """While the row still holds A's token: its countdown, then EXPIRED and what n does
    then (`once_expired`; None: n waits for a reclaim). None once A's token is gone."""
    if notes.a is None or claim.token != notes.a.token:
        return None
    job = claim.job_id
    if claim.seconds_left(board.db_now) > 0:
        left = _left(claim, board)
        return Watch(f"A's lease on job #{job} runs out in {left} (A no longer renews)")
    expired = f"A's lease on job #{job} EXPIRED at {clock(claim.lease_expires_at)}"
    if once_expired is None:
        return Watch(f"{expired}, waiting for a reclaim")
    return Watch(f"{expired}: {once_expired}", True)


def before_resume(notes: DemoNotes, board: BoardSnapshot) -> Watch:
    """Before the resume: nothing to wait for; where B stands."""
    a = name(notes.a.worker if notes.a else None)
    claim = claim_of(board, notes.email_job)
    if notes.b is not None and claim is not None and claim.token == notes.b.token:
        left = _left(claim, board)
        return Watch(
            f"B holds job #{notes.email_job} ({left} left on its lease); n resumes A ({a})",
            ready=True,
        )
    if claim is None and all_listed(board):
        return Watch(f"B no longer holds job #{notes.email_job}; n resumes A ({a})", True)
    return Watch(f"n resumes A ({a})", ready=True)


def before_fence(notes: DemoNotes, board: BoardSnapshot) -> Watch:
    """Before the fence: A must come back and meet it."""
    a = notes.a
    if a is None:
        return Watch("")
    if notes.a_stopped:
        return Watch(f"A ({a.worker}) has stopped and will not come back: n moves on", True)
    since_b = notes.b.claimed_at if notes.b is not None else None
    for failure in board.failures:
        if failure.job_id != notes.email_job or failure.token != a.token:
            continue
        if failure.outcome == "completion_rejected":
            return Watch(
                f"A's completion was rejected at {clock(failure.at)} (failures log): n", True
            )
        if since_b is not None and failure.at > since_b:
            return Watch(f"A came back at {clock(failure.at)} to a lost lease: n", True)
    return Watch(f"waiting for A ({a.worker}) to come back and try to complete its job")


def before_completion(notes: DemoNotes, board: BoardSnapshot) -> Watch:
    """Before the end: B's attempt must end."""
    b = notes.b
    job = notes.email_job
    claim = claim_of(board, job)
    if b is not None and claim is not None and claim.token == b.token:
        left = _left(claim, board)
        return Watch(f"waiting for B ({b.worker}) to complete job #{job} ({left} left)")
    if claim is None and all_listed(board):
        return Watch(f"job #{job} is no longer claimed: n shows how it ended", True)
    if claim is not None:
        return Watch(f"waiting for job #{job} to end (now held by {name(claim.worker_id)})")
    return Watch(f"waiting for job #{job} to end")

