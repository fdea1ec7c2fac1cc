"""Reads the training story's narration the moment it is shown and checks every claim in it
against the database: the email job's attempts history, its holder, the workers' states,
the email copies and the billing job's charges. A sentence that is not true of the database
at that moment fails the test, naming the sentence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from taskboard.core.fleet import Fleet
from taskboard.core.training.notes import clock, short_token
from taskboard.core.view.board import AttemptRow, BoardSnapshot, JobDetail


@dataclass(frozen=True)
class World:
    """The database when the narration was shown."""

    board: BoardSnapshot
    email: JobDetail | None
    billing: JobDetail | None
    paused_here: frozenset[str] = frozenset()

    def state(self, worker: str) -> str:
        """A worker's state. An embedded worker pauses and resumes at once and writes its
        row at its next heartbeat (within a second), so its own word counts first."""
        if worker in self.paused_here:
            return "paused"
        row = next((w.state for w in self.board.workers if w.id == worker), "missing")
        return "running" if row == "paused" and worker in self.running_here else row

    running_here: frozenset[str] = frozenset()

    def attempt(self, token_prefix: str) -> AttemptRow:
        assert self.email is not None
        found = [a for a in self.email.attempts if short_token(a.token) == token_prefix]
        assert len(found) == 1, (token_prefix, self.email.attempts)
        return found[0]


async def world(fleet: Fleet, email_job: int | None, billing_job: int | None) -> World:
    board = await fleet.refresh()
    email = await fleet.job_detail(email_job) if email_job is not None else None
    billing = await fleet.job_detail(billing_job) if billing_job is not None else None
    here = {wid: fleet.workers[wid] for wid in fleet.embedded_worker_ids()}
    paused = frozenset(wid for wid, worker in here.items() if worker.paused)
    return World(board, email, billing, paused, frozenset(here) - paused)


def _find(pattern: str, text: str) -> re.Match[str]:
    found = re.search(pattern, text)
    assert found is not None, f"expected {pattern!r} in {text!r}"
    return found


def check(step: int, text: str, w: World) -> int:
    """Check step `step`'s narration `text` against `w`; returns how many claims it checked."""
    checks = {1: _claimed, 2: _stalled, 3: _stepping_in, 4: _reclaimed, 5: _resumed,
              6: _fenced, 7: _boundary}
    if step == 0:
        assert "Press n" in text
        return 0
    return checks[step](text, w)


def _named_in_state(w: World, rest: str, text: str, state: str) -> re.Match[str] | None:
    """The sentence of workers ("a", "a and b") followed by `rest`, if the text says it,
    checking that each of them is in `state` on the board."""
    said = re.search(r"([\w-]+(?: and [\w-]+)*)" + rest, text)
    if said:
        for worker in said[1].split(" and "):
            assert w.state(worker) == state, (worker, w.board.workers)
    return said


def _claimed(text: str, w: World) -> int:
    m = _find(r"Enqueued email job #(\d+) and billing job #(\d+)\.", text)
    assert w.email is not None and w.email.id == int(m[1]) and w.email.kind == "email"
    assert w.billing is not None and w.billing.id == int(m[2]) and w.billing.kind == "billing"
    n = 1
    aside = _named_in_state(w, r" stands? aside \(paused\) so that ([\w-]+) takes", text, "paused")
    if aside:
        assert w.state(aside[2]) == "running"
        n += 1
    return n


def _stalled(text: str, w: World) -> int:
    m = _find(r"A \(([\w-]+), token ([0-9a-f]{8})\) (sent the email and )?is paused before "
              r"completing job #(\d+)", text)
    assert w.email is not None and w.email.id == int(m[4])
    a = w.attempt(m[2])
    assert a.worker == m[1] and a.outcome is None, a  # A still holds its claim, unfinished
    assert w.state(m[1]) in ("paused", "pausing"), w.board.workers
    if m[3]:
        assert any(c.attempt == a.ordinal for c in w.email.emails), w.email.emails
    n = 2
    if _named_in_state(w, " still stands? aside", text, "paused"):
        assert len(w.email.attempts) == 1, "nobody takes the job until n brings B in"
        n += 1
    return n


def _stepping_in(text: str, w: World) -> int:
    assert w.email is not None
    n = 0
    m = re.search(r"A's lease ran out at (\d\d:\d\d:\d\d\.\d)", text)
    if m:
        first = w.email.attempts[0]
        # Ran out: the deadline is past (the row's, while A's token is on it).
        assert w.email.lease_expires_at is None or w.email.lease_expires_at <= w.board.db_now \
            or w.email.holder != first.worker
        n += 1
    if _named_in_state(w, " steps? back in to play B", text, "running"):
        n += 1
    return n


def _reclaimed(text: str, w: World) -> int:
    m = _find(r"B \(([\w-]+)\) reclaimed job #(\d+) from ([\w-]+) at (\S+) with a new token, "
              r"([0-9a-f]{8}) \(claim (\d+)\)", text)
    assert w.email is not None and w.email.id == int(m[2])
    b = w.attempt(m[5])
    assert (b.worker, b.ordinal, clock(b.claimed_at)) == (m[1], int(m[6]), m[4]), b
    before = [a for a in w.email.attempts if a.ordinal == b.ordinal - 1]
    assert before and before[0].worker == m[3], w.email.attempts
    return 3


def _resumed(text: str, w: World) -> int:
    m = _find(r"A \(([\w-]+)\) runs again with token ([0-9a-f]{8}), but job #(\d+) now holds "
              r"B's token ([0-9a-f]{8})", text)
    assert w.email is not None and w.email.id == int(m[3])
    assert w.state(m[1]) == "running", w.board.workers
    b = w.attempt(m[4])
    # "now holds B's token": B's attempt is unfinished and B is the job's holder.
    assert b.outcome is None and w.email.holder == b.worker, (b, w.email.holder)
    assert w.email.state == "running"
    return 2


def _fenced(text: str, w: World) -> int:
    m = _find(r"A \(([\w-]+)\) came back at (\S+), (\d+\.\d)s after B's claim at (\S+?): its "
              r"(completion changed zero rows and was rejected|renewal said the lease was lost)",
              text)
    assert w.email is not None
    a = next(x for x in w.email.attempts if x.worker == m[1] and x.ordinal == 1)
    b = next(x for x in w.email.attempts if x.ordinal == 2)
    assert a.ended_at is not None and clock(a.ended_at) == m[2], a
    assert clock(b.claimed_at) == m[4]
    assert a.ended_at > b.claimed_at
    assert f"{(a.ended_at - b.claimed_at).total_seconds():.1f}" == m[3]
    expected = "completion_rejected" if "rejected" in m[5] else "lease_lost"
    assert a.outcome == expected, a
    # "The record stays B's": A's late write changed nothing; the job is B's or done by B.
    assert w.email.state in ("running", "completed") and (
        w.email.holder in (None, b.worker)
    )
    return 3


def _boundary(text: str, w: World) -> int:
    assert w.email is not None
    n = 0
    m = re.search(r"B completed at (\d\d:\d\d:\d\d\.\d)\.", text)
    if m:
        b = next(x for x in w.email.attempts if x.ordinal == 2)
        a = next(x for x in w.email.attempts if x.ordinal == 1)
        assert b.outcome == "completed" and b.ended_at is not None and clock(b.ended_at) == m[1]
        # The story's order: B completed after A came back and met the fence.
        assert a.ended_at is not None and b.ended_at >= a.ended_at, (a, b)
        assert w.email.state == "completed"
        n += 1
    copies = sorted(w.email.emails, key=lambda c: c.at)
    times = {1: "once", 2: "twice"}.get(len(copies), f"{len(copies)} times")
    assert f"The email went out {times}:" in text, (text, copies)
    for number, copy in enumerate(copies, start=1):
        assert f"copy {number} by {copy.worker} (claim {copy.attempt}) at {copy.at:%H:%M:%S}" \
            in text
    n += 1
    billing = re.search(r"Billing: (\d+) charges?(; the reclaim's request replayed it "
                        r"\(no new charge\))?\.", text)
    if billing:
        assert w.billing is not None
        charges = {c.payment_intent for c in w.billing.charges}
        assert len(charges) == int(billing[1]), w.billing.charges
        replays = sum(c.replays or 0 for c in w.billing.charges)
        assert bool(billing[2]) == (replays > 0), w.billing.charges
        if billing[2]:  # the replay was the reclaim's: the billing job was claimed twice
            assert len(w.billing.attempts) >= 2, w.billing.attempts
        n += 1
    return n
