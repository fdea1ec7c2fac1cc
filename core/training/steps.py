"""The moves of the article's timeline: what each step does to the board when the trainer
presses n, and what it must see first.

Every fact a step narrates comes from the job's attempts history (`BoardControl.job_detail`),
read when n is pressed. The demo's handlers wait for the story's cue after their send
(`kinds.StoryCue`): A's until the stall, B's until A came back; so each step finds the job
where its narration says it is, at any pace. The board (`BoardSnapshot`) serves only
to pick who plays whom, to say what a step still waits for, and to tell when A's lease ran
out (the history keeps claims and ends, not deadlines).

A step's move may take several commands; each one done is written down in `DemoNotes`
before the next, so a step that stopped halfway (a refused command, a lost database) and
is tried again never sends a command twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from taskboard.core.training.kinds import ALL, FIRST_CLAIMS
from taskboard.core.training.notes import (
    Actor,
    DemoNotes,
    attempt_of,
    came_back,
    holder_attempt,
    newest_email_claim,
    next_attempt,
)
from taskboard.core.training.watch import (
    Awaits,
    before_b,
    before_completion,
    before_fence,
    before_reclaim,
    out_of_date,
)
from taskboard.core.view.board import BoardSnapshot, JobDetail, WorkerRow
from taskboard.core.view.control import BoardControl, CommandRefused


class DemoWaiting(Exception):
    """The board has not reached the state a step needs yet; the message says what is awaited."""


StepAction = Callable[[BoardControl, BoardSnapshot | None, DemoNotes], Awaitable[None]]
"""A step's move: may send commands, must raise `DemoWaiting` rather than act too early."""

Narrate = Callable[[DemoNotes], str]
"""A step's narration from what the script has learned; says only what is known."""


@dataclass(frozen=True)
class DemoStep:
    """One beat of the story: what to do on entering it, and what to tell the audience."""

    title: str
    narrate: Narrate
    action: StepAction | None = None
    """Run when the trainer moves *into* this step; None for the introduction."""
    awaits: Awaits | None = None
    """While the step before is current: what this one still needs, as the status says."""


def require(snapshot: BoardSnapshot | None) -> BoardSnapshot:
    """The board a step decides on, or `DemoWaiting` when there is none worth deciding on."""
    if snapshot is None:
        raise DemoWaiting("waiting for the first refresh of the board")
    if not snapshot.connected:
        raise DemoWaiting("waiting for the database to come back")
    return snapshot


async def _detail(control: BoardControl, job_id: int | None) -> JobDetail:
    if job_id is None:
        raise DemoWaiting("waiting for the email job to be enqueued")
    return await control.job_detail(job_id)


def _worker(board: BoardSnapshot, worker_id: str) -> WorkerRow | None:
    return next((w for w in board.workers if w.id == worker_id), None)


def _actor_a(notes: DemoNotes) -> Actor:
    if notes.a is None:
        raise DemoWaiting("waiting for worker A to be known")
    return notes.a


def _not_yet(awaits: Awaits, notes: DemoNotes, board: BoardSnapshot, otherwise: str) -> DemoWaiting:
    """What the step waits for: the board's account if it has one, else `otherwise`."""
    if out_of_date(notes, board):
        return DemoWaiting(otherwise)
    seen = awaits(notes, board)
    return DemoWaiting(seen.status if seen.status and not seen.ready else otherwise)


async def enqueue_jobs(
    control: BoardControl, snapshot: BoardSnapshot | None, notes: DemoNotes
) -> None:
    """Idle workers but the first stand aside; then the email and the billing job."""
    board = require(snapshot)
    if not notes.asides_done:
        for worker_id in _bystanders(control, board, notes):
            await control.pause(worker_id)
            notes.stood_aside.append(worker_id)
        notes.asides_done = True
    # Billing rides along so the last step can contrast an unfenceable send (SMTP) with an
    # idempotent one (Stripe): the worker holding both loses both.
    if notes.email_job is None:
        notes.email_job = await control.enqueue_sample("email")
    if notes.billing_job is None:
        notes.billing_job = await control.enqueue_sample("billing")
    notes.learned((await _detail(control, notes.email_job)).created_at)


def _bystanders(control: BoardControl, board: BoardSnapshot, notes: DemoNotes) -> list[str]:
    # The first running worker (worker-a of the demo's fleet) takes the jobs and plays A; the
    # others wait paused until A stalls, so the names on the board match the story's roles.
    # Only idle ones: pausing a worker that holds jobs would let their leases expire into
    # the story.
    here = set(control.embedded_worker_ids())
    running = [w for w in board.workers if w.state == "running" and w.id in here]
    if running:
        notes.first_worker = running[0].id
    return [w.id for w in running[1:] if w.in_flight == 0 and w.id not in notes.stood_aside]


async def stall_holder(
    control: BoardControl, snapshot: BoardSnapshot | None, notes: DemoNotes
) -> None:
    """Pause the worker holding the email job: A."""
    board = require(snapshot)
    if notes.a is None:
        await _pause_holder(control, board, notes)


async def bring_b(
    control: BoardControl, snapshot: BoardSnapshot | None, notes: DemoNotes
) -> None:
    """Once the board shows A's lease expired, give back the workers that stood aside (or
    add one) to play B. Until then nobody could take the job, so the row shows EXPIRED for
    as long as the trainer talks: a reclaim the moment a lease ends would hide it."""
    board = require(snapshot)
    a = _actor_a(notes)
    if notes.b_ready:
        return
    # Only a board read after A's claim can tell the expiry (one from before the claim
    # does not list the job at all, as if it were done).
    seen = None if out_of_date(notes, board) else before_b(notes, board)
    if seen is not None:
        notes.see(board)  # A's deadline, for the narration, from the board decided on
    if seen is None or not seen.ready:
        raise DemoWaiting(seen.status if seen else "waiting for the board to catch up")
    for worker_id in notes.stood_aside:
        if worker_id == a.worker:
            # A bystander whose claim was in flight when it was paused can hold the email
            # (CI, once, under load): it is A then, and stays paused for resume_stale,
            # which refused to resume a worker already running.
            continue
        try:
            await control.resume(worker_id)
        except CommandRefused:
            continue  # resumed or stopped by hand meanwhile: nothing to give back
        notes.back_for_b.append(worker_id)
    others = [w for w in board.workers if w.state == "running" and w.id != a.worker]
    if not notes.back_for_b and not others:
        # Without a second running worker nobody reclaims and the story stops here.
        notes.added_worker = await control.add_worker()
    notes.b_ready = True


async def _pause_holder(control: BoardControl, board: BoardSnapshot, notes: DemoNotes) -> None:
    detail = await _detail(control, notes.email_job)
    attempt = holder_attempt(detail)
    if attempt is None:
        # The trainer may have enqueued another email job (e) after this one finished.
        other = newest_email_claim(board)
        if other is not None and other.job_id != detail.id:
            detail = await _detail(control, other.job_id)
            attempt = holder_attempt(detail)
    if attempt is None:
        raise DemoWaiting(_unclaimed(detail))
    worker = _worker(board, attempt.worker)
    paused_here = worker is None or worker.state not in ("paused", "pausing")
    if paused_here:
        try:
            await control.pause(attempt.worker)
        except CommandRefused:
            # Already paused: a worker writes its row at its next heartbeat, so the board
            # can still say "running" for a second after the pause (seen under load).
            paused_here = False
    after = await _detail(control, detail.id)
    held = holder_attempt(after)
    if held is None or held.token != attempt.token:
        # It completed between the read and the pause: a stall too late tells nothing.
        if paused_here:
            await control.resume(attempt.worker)
        raise DemoWaiting(_unclaimed(after))
    notes.email_job = detail.id
    notes.a = Actor.of(attempt)
    notes.a_sent = any(c.attempt == attempt.ordinal for c in after.emails)
    notes.learned(attempt.claimed_at)
    # A is paused: its handlers may finish their work now and stop at the completion.
    notes.cue.let_go(FIRST_CLAIMS)


def _unclaimed(detail: JobDetail) -> str:
    if detail.state in ("pending", "scheduled", "running"):
        return f"waiting for a worker to claim email job #{detail.id}"
    return f"email job #{detail.id} finished before the stall: e enqueues another, then n"


async def await_reclaim(
    control: BoardControl, snapshot: BoardSnapshot | None, notes: DemoNotes
) -> None:
    """Learn B from the history: the claim after A's, whatever became of it since."""
    board = require(snapshot)
    a = _actor_a(notes)
    detail = await _detail(control, notes.email_job)
    attempt = next_attempt(detail, a)
    if attempt is None:
        waiting = f"waiting for another worker to reclaim job #{detail.id}"
        raise _not_yet(before_reclaim, notes, board, waiting)
    notes.b = Actor.of(attempt)
    notes.emails = detail.emails
    notes.learned(attempt.claimed_at)


async def resume_stale(
    control: BoardControl, snapshot: BoardSnapshot | None, notes: DemoNotes
) -> None:
    """Let A run again, with its old token."""
    board = require(snapshot)
    a = _actor_a(notes)
    if notes.a_resumed:
        return
    worker = _worker(board, a.worker)
    if a.worker not in control.embedded_worker_ids() and _stopped(worker):
        notes.a_stopped = True
    else:
        try:
            await control.resume(a.worker)
        except CommandRefused:
            # Resumed by hand already: the story goes on all the same.
            if worker is None or worker.state != "running":
                raise
    notes.a_resumed = True


def _stopped(worker: WorkerRow | None) -> bool:
    return worker is not None and worker.state in ("stopped", "gone")


async def await_fence(
    control: BoardControl, snapshot: BoardSnapshot | None, notes: DemoNotes
) -> None:
    """Learn from A's own attempt when A came back and how the fence stopped it."""
    board = require(snapshot)
    a = _actor_a(notes)
    if notes.a_stopped:
        notes.cue.let_go(ALL)
        return
    detail = await _detail(control, notes.email_job)
    attempt = attempt_of(detail, a.token)
    if attempt is None or not came_back(attempt):
        if a.worker not in control.embedded_worker_ids() and _stopped(_worker(board, a.worker)):
            notes.a_stopped = True
            notes.cue.let_go(ALL)
            return
        waiting = f"waiting for A ({a.worker}) to come back and try to complete its job"
        raise _not_yet(before_fence, notes, board, waiting)
    notes.a_back_at = attempt.ended_at
    notes.a_outcome = attempt.outcome
    notes.learned(attempt.ended_at)
    # A met the fence: B, held after its send until now, may complete (step 7).
    notes.cue.let_go(ALL)


async def await_completion(
    control: BoardControl, snapshot: BoardSnapshot | None, notes: DemoNotes
) -> None:
    """Learn how B's attempt ended, who sent each email copy, and the billing job's charges."""
    board = require(snapshot)
    b = notes.b
    if b is None:
        raise DemoWaiting("waiting for worker B to be known")
    notes.cue.let_go(ALL)
    detail = await _detail(control, notes.email_job)
    attempt = attempt_of(detail, b.token)
    if attempt is None or attempt.outcome is None:
        waiting = f"waiting for B ({b.worker}) to complete job #{detail.id}"
        raise _not_yet(before_completion, notes, board, waiting)
    notes.b_done_at = attempt.ended_at
    notes.b_outcome = attempt.outcome
    notes.emails = detail.emails
    notes.learned(attempt.ended_at)
    if notes.billing_job is not None:
        notes.learn_charges(await _detail(control, notes.billing_job))
