"""The training story on a real demo fleet, at a trainer's slow pace and at a fast one
(n pressed as soon as allowed, and several times early, also on a board read before the last
step's commands), then again after a reset: the narration never shows a "?", the status never
claims a wait that is already over, every sentence of a step's narration is true of the
database when the step is shown (`narration_truth`), every command is sent once, and the
ending names who sent each email copy and answers the article's question.

The pace is the trainer's `dwell`: how long it talks before each n, counted in leases (what
a lease is for, the trainer's minutes are for the story), so a slow story is a few seconds.

Like the dashboard, the trainer here refreshes the board, lets the script observe it, and
presses n with the latest board; before each refresh it reads the email job's history, so a
fact already true then must show in the status computed from that refresh.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from taskboard.core.fleet import Fleet
from taskboard.core.training.notes import attempt_of, came_back, clock
from taskboard.core.training.scenario import DemoScript, StoryCue
from taskboard.core.training.story import ANSWER
from taskboard.core.view.board import BoardSnapshot, JobDetail

from tests.demo_fleet import LEASE, Recording, demo_fleet, within
from tests.tui import narration_truth

STORY = [
    ("pause", "worker-b"),  # stands aside: worker-a takes the jobs and plays A
    ("enqueue_sample", "email"),
    ("enqueue_sample", "billing"),
    ("pause", "worker-a"),  # A stalls
    ("resume", "worker-b"),  # back to play B
    ("resume", "worker-a"),  # A comes back
]

# Statuses that claim a wait, and the fact that ends each.
WAITS_FOR_RECLAIM = ("runs out in", "waiting for a reclaim", "to claim")
WAITS_FOR_A = ("to come back",)
WAITS_FOR_B = ("waiting for B",)


@dataclass(frozen=True)
class Facts:
    """What the email job's history said just before a refresh."""

    reclaimed: bool = False
    a_back: bool = False
    b_done: bool = False


class Trainer:
    """Drives a `DemoScript` over a real fleet as the dashboard does, checking every text."""

    def __init__(self, fleet: Fleet, cue: StoryCue) -> None:
        self.fleet = fleet
        self.control = Recording(fleet)
        self.script = DemoScript(cue=cue)
        self.board: BoardSnapshot | None = None
        self.older: BoardSnapshot | None = None  # the board before `board`
        self.seen: list[str] = []
        self.expired_rows = 0  # refreshes whose email job row showed A's lease EXPIRED
        self.truths: dict[int, int] = {}  # step -> claims of its narration checked
        self.reclaimed_rows = 0  # refreshes whose email job row was reclaimed from worker-a

    def said(self) -> str:
        progress = self.script.progress()
        return f"{progress.title}\n{progress.narration}\n{progress.status}"

    async def look(self) -> None:
        """Refresh the board and let the script observe it."""
        facts = await self._facts()
        board = await self.fleet.refresh()
        self.older, self.board = self.board, board
        self.script.observe(board)
        self._check(facts)
        self._rows(board)

    async def n(self, board: BoardSnapshot | None = None) -> None:
        """Press n with `board` (default: the latest); a new step's narration is checked
        against the database at once, as the audience would read it."""
        before = self.script.index
        await self.script.advance(self.control, board or self.board)
        self._check(Facts())
        if self.script.index != before:
            notes = self.script.notes
            seen = await narration_truth.world(self.fleet, notes.email_job, notes.billing_job)
            step = self.script.index
            self.truths[step] = narration_truth.check(step, self.script.narration, seen)

    async def until(self, what: str, condition: object, timeout: float = 15.0) -> None:
        """Keep refreshing (and checking) until `condition()` holds."""

        async def looked() -> object:
            await self.look()
            value = condition() if callable(condition) else condition
            return await value if asyncio.iscoroutine(value) else value

        await within(looked, what, timeout=timeout, step=0.1)

    async def detail(self) -> JobDetail:
        notes = self.script.notes
        assert notes.email_job is not None
        return await self.fleet.job_detail(notes.email_job)

    async def _facts(self) -> Facts:
        notes = self.script.notes
        if notes.a is None or notes.email_job is None:
            return Facts()
        detail = await self.fleet.job_detail(notes.email_job)
        a = attempt_of(detail, notes.a.token)
        later = [x for x in detail.attempts if x.ordinal > notes.a.ordinal]
        b_done = bool(later) and later[0].outcome is not None
        return Facts(bool(later), a is not None and came_back(a), b_done)

    def _rows(self, board: BoardSnapshot) -> None:
        notes = self.script.notes
        for claim in board.claims:
            if claim.job_id != notes.email_job or notes.a is None:
                continue
            if claim.token == notes.a.token and claim.seconds_left(board.db_now) <= 0:
                self.expired_rows += 1
            if claim.reclaimed_from == notes.a.worker:
                self.reclaimed_rows += 1

    def _check(self, facts: Facts) -> None:
        text = self.said()
        self.seen.append(text)
        assert "?" not in text, text
        status = self.script.status
        for over, claims in (
            (facts.reclaimed, WAITS_FOR_RECLAIM),
            (facts.a_back, WAITS_FOR_A),
            (facts.b_done, WAITS_FOR_B),
        ):
            assert not (over and any(c in status for c in claims)), f"{status!r} after {facts}"


async def fast_story(trainer: Trainer) -> None:
    """n as soon as allowed, three times per refresh, the third on the board before."""
    script = trainer.script
    deadline = asyncio.get_running_loop().time() + 25
    await trainer.look()
    while not script.finished:
        assert asyncio.get_running_loop().time() < deadline, f"stuck: {trainer.said()}"
        for board in (trainer.board, trainer.board, trainer.older):
            await trainer.n(board)
        await asyncio.sleep(0.05)
        await trainer.look()


async def check_ending(trainer: Trainer) -> None:
    """The last step's text: who sent each copy, and the answer."""
    script = trainer.script
    assert script.finished
    detail = await trainer.detail()
    assert detail.emails, "no email copy reached the sink"
    for number, copy in enumerate(sorted(detail.emails, key=lambda c: c.at), start=1):
        assert f"copy {number} by {copy.worker} (claim {copy.attempt})" in script.narration
    assert ANSWER in script.narration
    assert trainer.control.commands == STORY
    # The row's beats: A's lease EXPIRED (B stood aside until the trainer saw it), then the
    # row held by B, reclaimed from worker-a.
    assert trainer.expired_rows >= 1 and trainer.reclaimed_rows >= 1


async def test_the_story_at_a_fast_pace(db_url: str) -> None:
    cue = StoryCue()
    async with demo_fleet(db_url, cue=cue) as fleet:
        trainer = Trainer(fleet, cue)
        await fast_story(trainer)
        await check_ending(trainer)
        detail = await trainer.detail()
        notes = trainer.script.notes
        assert notes.a is not None and notes.b is not None
        a, b = attempt_of(detail, notes.a.token), attempt_of(detail, notes.b.token)
        assert a is not None and b is not None
        assert (a.worker, b.worker) == ("worker-a", "worker-b")
        fence = next(t for t in trainer.seen if t.startswith("6."))
        assert a.ended_at is not None
        assert f"came back at {clock(a.ended_at)}" in fence
        assert f"after B's claim at {clock(b.claimed_at)}" in fence
        assert sorted(trainer.truths) == list(range(1, 8)), trainer.truths


DWELL = {1: 1.5, 4: 1.5}
"""Leases the slow trainer talks at a step before n: at step 1 past the time a job takes
(A's handlers wait for the stall), at step 4 past the time B's takes (B keeps the job until
A came back); a quarter of a lease at the others."""


async def test_the_story_at_a_slow_pace(db_url: str) -> None:
    cue = StoryCue()
    async with demo_fleet(db_url, cue=cue) as fleet:
        trainer = Trainer(fleet, cue)
        script = trainer.script
        await trainer.look()
        await trainer.n()  # enqueue
        loop = asyncio.get_running_loop()
        while not script.finished:
            talk_until = loop.time() + DWELL.get(script.index, 0.25) * LEASE
            await trainer.until("the trainer stops talking",
                                lambda t=talk_until: loop.time() >= t, timeout=2 * LEASE + 5)
            if script.index == 1:
                # Still A's, however long the trainer talked: nothing finished before the stall.
                assert "holds email job" in script.status and script.progress().ready
            await trainer.until(f"n to act after step {script.index}",
                                lambda: script.progress().ready, timeout=4 * LEASE + 10)
            before = script.index
            await trainer.n()
            assert script.index == before + 1, script.status
        await check_ending(trainer)
        assert sorted(trainer.truths) == list(range(1, 8)), trainer.truths
        notes = script.notes
        # One charge: the reclaim replays the billing job's recorded steps (create, confirm)
        # and asks Stripe nothing, so there is no request for Stripe to replay either.
        assert notes.email_job is not None and notes.charges == 1 and notes.replays == 0
        assert "Billing: 1 charge." in script.narration


def _state(trainer: Trainer, state: str) -> object:
    async def check() -> bool:
        return (await trainer.detail()).state == state

    return check


def _b_done(trainer: Trainer) -> object:
    async def check() -> bool:
        detail = await trainer.detail()
        return len(detail.attempts) >= 2 and detail.state == "completed"

    return check


def _a_back(trainer: Trainer) -> object:
    async def check() -> bool:
        a = trainer.script.notes.a
        assert a is not None
        attempt = attempt_of(await trainer.detail(), a.token)
        return attempt is not None and came_back(attempt)

    return check


async def test_after_a_reset_the_story_runs_again_from_the_start(db_url: str) -> None:
    cue = StoryCue()
    async with demo_fleet(db_url, cue=cue) as fleet:
        trainer = Trainer(fleet, cue)
        await fast_story(trainer)
        first_job = trainer.script.notes.email_job
        assert first_job is not None
        await fleet.reset_demo()  # what R does, then the scenario's restart
        trainer.script.restart()
        trainer.control.commands.clear()
        trainer.board = trainer.older = None
        await trainer.look()
        board = trainer.board
        assert board is not None
        assert [w.id for w in board.workers] == ["worker-a", "worker-b"]
        assert board.claims == () and board.failures == () and board.effects.emails == ()
        assert trainer.script.index == 0 and "Press n" in trainer.script.narration
        await fast_story(trainer)
        assert trainer.script.notes.email_job is not None
        assert trainer.script.notes.email_job > first_job
        await check_ending(trainer)
