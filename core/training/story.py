"""What the narration says at each step of the article's timeline, from what the script has
learned (`DemoNotes`). A fact not learned yet is left out of the sentence, never shown as a
placeholder. The story speaks of A and B and names the workers that play them.

Each text fits the narration panel at 80x24 (about five lines of 76 columns): the board
under it is what the audience should be watching.
"""

from __future__ import annotations

from taskboard.core.training.notes import Actor, DemoNotes, clock, seconds
from taskboard.core.training.steps import (
    DemoStep,
    await_completion,
    await_fence,
    await_reclaim,
    bring_b,
    enqueue_jobs,
    resume_stale,
    stall_holder,
)
from taskboard.core.training.watch import (
    before_b,
    before_completion,
    before_fence,
    before_reclaim,
    before_resume,
    before_stall,
)
from taskboard.core.view.board import EmailCopy

ARTICLE = "A lease expires when a worker disappears"
"""The seed article the scenario replays, by its title."""
ARTICLE_STEPS = (
    "Worker A receives token claim-a.",
    "A stalls long enough for its lease to expire.",
    "Worker B reclaims the job with token claim-b.",
    "A resumes and tries to mark the job complete.",
)
"""The article's timeline, quoted."""
ANSWER = "A rejected completion does not prove that no email was sent"
"""The article's question, answered in one sentence (the last step says it)."""
PROVES = "only that A no longer owned the job."
FENCE = "UPDATE jobs SET completed_at = now() WHERE id = $1 AND lease_token = $2"
"""The article's fenced completion, as the narration quotes it."""


def _job(job_id: int | None, kind: str = "") -> str:
    kind = f"{kind} " if kind else ""
    return f"{kind}job #{job_id}" if job_id is not None else f"the {kind}job"


def _verb(workers: list[str]) -> str:
    return "stand" if len(workers) > 1 else "stands"


def _who(actor: Actor | None, role: str) -> str:
    return f"{role} ({actor.worker})" if actor is not None else role


def intro(notes: DemoNotes) -> str:
    """Before the first n: the article, named, and the four steps it describes."""
    steps = " ".join(f"{n}. {step}" for n, step in enumerate(ARTICLE_STEPS, start=1))
    return (
        f'The article "{ARTICLE}" describes this timeline: {steps} Here it runs live on '
        "Maya's email job, with a billing job beside it. Press n to enqueue both."
    )


def claimed(notes: DemoNotes) -> str:
    """Jobs enqueued; the first worker takes them."""
    aside = ""
    if notes.stood_aside:
        who = " and ".join(notes.stood_aside)
        first = notes.first_worker or "the first worker"
        aside = f"{who} {_verb(notes.stood_aside)} aside (paused) so that {first} takes them "
        aside += "and plays A. "
    return (
        f"Enqueued {_job(notes.email_job, 'email')} and {_job(notes.billing_job, 'billing')}. "
        f"{aside}"
        "A claim writes a fresh random token and a deadline, the lease: until then, other "
        "workers leave the job alone. Watch the Token column and the countdown."
    )


def stalled(notes: DemoNotes) -> str:
    """A paused before completing; nobody else may take the job yet."""
    a = notes.a
    who = f"A ({a.worker}, token {a.short_token})" if a else "A"
    done = "sent the email and " if notes.a_sent else ""
    if notes.stood_aside:
        aside = f"{' and '.join(notes.stood_aside)} still {_verb(notes.stood_aside)} aside"
        after = f"{aside}: nobody takes the job until n brings B in."
    else:
        after = "Another running worker may reclaim the job as soon as it expires."
    return (
        f"{who} {done}is paused before completing {_job(notes.email_job)}. A paused worker "
        f"stops renewing: watch its countdown run down to EXPIRED. {after}"
    )


def stepping_in(notes: DemoNotes) -> str:
    """A's lease ran out; B brought in."""
    expired = f" at {clock(notes.a_deadline)}" if notes.a_deadline else ""
    if notes.added_worker:
        b = f"{notes.added_worker} was added to play B"
    elif notes.back_for_b:
        b = f"{' and '.join(notes.back_for_b)} {'step' if len(notes.back_for_b) > 1 else 'steps'} "
        b += "back in to play B"
    else:
        b = "Another running worker plays B"
    return (
        f"A's lease ran out{expired}: an expired lease is an offer, and until a worker "
        f"takes it the job just waits. {b}: the first worker that looks reclaims the job "
        "with a new token. Watch the job's row: a new holder, a new token, a fresh lease."
    )


def reclaimed(notes: DemoNotes) -> str:
    """B's claim, from the history."""
    b, a = notes.b, notes.a
    if b is None:
        return f"Another worker reclaimed {_job(notes.email_job)}."
    taken = f" from {a.worker}" if a else ""
    return (
        f"{_who(b, 'B')} reclaimed {_job(notes.email_job)}{taken} at {clock(b.claimed_at)} "
        f"with a new token, {b.short_token} (claim {b.ordinal}). B runs the handler "
        "again, but A's send was recorded as a step under A's lease, so B replays it "
        "instead of sending again; only a send still in flight when a worker stalls goes "
        "out a second time (same Message-ID)."
    )


def resumed(notes: DemoNotes) -> str:
    """A runs again with its old token."""
    a, b = notes.a, notes.b
    if notes.a_stopped:
        return f"{_who(a, 'A')} has stopped: it will never come back to complete the job."
    old = f"token {a.short_token}" if a else "its old token"
    new = f"B's token {b.short_token}" if b else "B's token"
    return (
        f"{_who(a, 'A')} runs again with {old}, but {_job(notes.email_job)} now holds {new}. "
        f"A's completion, {FENCE} with A's token as $2, changes zero rows: A no longer owns "
        "the job and must not report it done. Watch the failures log."
    )


def fenced(notes: DemoNotes) -> str:
    """When A came back, against B's claim."""
    a, b = notes.a, notes.b
    if notes.a_stopped or notes.a_back_at is None:
        return f"{_who(a, 'A')} never came back, so it never tried to complete the job."
    late = ""
    if b is not None:
        gap = seconds(b.claimed_at, notes.a_back_at)
        late = f", {gap} after B's claim at {clock(b.claimed_at)}"
    back = f"{_who(a, 'A')} came back at {clock(notes.a_back_at)}{late}"
    if notes.a_outcome == "completion_rejected":
        how = (
            f"{back}: its completion changed zero rows and was rejected, stamped when A "
            "really came back."
        )
    else:
        how = f"{back}: its renewal said the lease was lost, so A never sent its completion."
    return (
        f"{how} Both times are in the job's attempts history. The record "
        "stays B's; nothing A writes to the database counts any more."
    )


def boundary(notes: DemoNotes) -> str:
    """B's end, who sent each email copy, the answer, and billing."""
    if notes.b_outcome == "completed" and notes.b_done_at is not None:
        end = f"B completed at {clock(notes.b_done_at)}."
    elif notes.b_outcome:
        end = f"B's attempt at {_job(notes.email_job)} ended: {notes.b_outcome}."
    else:
        end = ""
    return " ".join(
        part
        for part in (end, _copies(notes.emails), f"{ANSWER}, {PROVES}", _billing(notes))
        if part
    )


def _copies(emails: tuple[EmailCopy, ...]) -> str:
    if not emails:
        return "No copy of the email reached this dashboard's SMTP sink."
    listed = ", ".join(
        f"copy {n} by {_sender(copy)} at {copy.at:%H:%M:%S}"
        for n, copy in enumerate(sorted(emails, key=lambda c: c.at), start=1)
    )
    times = {1: "once", 2: "twice"}.get(len(emails), f"{len(emails)} times")
    return f"The email went out {times}: {listed}."


def _sender(copy: EmailCopy) -> str:
    if copy.worker and copy.attempt is not None:
        return f"{copy.worker} (claim {copy.attempt})"
    if copy.attempt is not None:
        return f"claim {copy.attempt}"
    return "a claim that did not say which"


def _billing(notes: DemoNotes) -> str:
    if notes.billing_job is None or not notes.charges:
        return ""
    if notes.charges > 1:
        return f"Billing: {notes.charges} charges."
    # Stripe replays a request whose Idempotency-Key (from the job's identity) it has seen:
    # the answer of the first charge comes back, and no money moves a second time.
    replayed = "; the reclaim's request replayed it (no new charge)" if notes.replays else ""
    return f"Billing: 1 charge{replayed}."


def article_steps() -> tuple[DemoStep, ...]:
    """The seed article's timeline: claim, stall, reclaim, fenced completion, the boundary."""
    return (
        DemoStep("A lease expires when a worker disappears", intro),
        DemoStep("1. Worker A claims the email job", claimed, enqueue_jobs),
        DemoStep("2. A stalls", stalled, stall_holder, before_stall),
        DemoStep("3. The lease expires; B steps in", stepping_in, bring_b, before_b),
        DemoStep("4. B reclaims with a new token", reclaimed, await_reclaim, before_reclaim),
        DemoStep("5. A comes back", resumed, resume_stale, before_resume),
        DemoStep("6. The fence stops A", fenced, await_fence, before_fence),
        DemoStep(
            "7. B completes: the boundary of the fence",
            boundary,
            await_completion,
            before_completion,
        ),
    )
