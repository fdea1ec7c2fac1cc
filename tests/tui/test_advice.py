"""Lease advice: a row per kind with its verdict and suggestion, the rule in words, and the
advice a real fleet gives for kinds whose durations are known."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from taskboard.core.board import KindAdvice
from taskboard.core.db import Database
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.fleet import Fleet
from taskboard.core.jobs import NewJob, enqueue_many
from taskboard.core.kinds.registry import JobContext, JobKind, KindRegistry
from taskboard.tui.format import Colours
from taskboard.tui.screens.advice import EMPTY, RULE, AdviceScreen, verdict_style
from taskboard.tui.screens.reading import WAITING, ReadingLine

from tests.tui.fakes_screens import (
    LARGE,
    SMALL,
    Hosted,
    ScreensControl,
    advice_scene,
    hosting,
    shown_text,
)

SnapCompare = Callable[..., bool]


async def open_advice(run: Hosted, control: Any) -> AdviceScreen:
    screen = AdviceScreen(control)
    run.app.push_screen(screen)
    await run.until(lambda: screen.advice is not None and not screen.reading, "the advice")
    await run.pilot.pause()
    return screen


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("size", [SMALL, LARGE])
async def test_each_kind_has_its_numbers_verdict_suggestion_and_reason(
    size: tuple[int, int],
) -> None:
    async with hosting(size=size) as run:
        screen = await open_advice(run, ScreensControl())
        table = shown_text(screen.query_one("#advice-table"))
        lines = {line.split()[0]: flat(line) for line in table.splitlines() if line.strip()}
        assert "412 1.85 s 38.2 s 44.9 s 9.80 s 60 s too short 115 s" in lines["billing"]
        assert "2381 0.21 s 0.84 s 2.30 s 52.0 s 60 s ok —" in lines["email"]
        assert "600 s too long 10 s" in lines["noop"]
        assert "p99 38.2 s against a 60 s lease" in flat(table)  # the reason, at any width
        assert flat(RULE) in flat(shown_text(screen.query_one("#advice-rule")))
        assert "2 to change" in shown_text(screen.query_one(ReadingLine))


def test_verdicts_are_coloured_by_what_they_cost() -> None:
    colours = Colours()
    assert colours.bad in verdict_style("too short", colours)
    assert colours.warn in verdict_style("too long", colours)
    assert verdict_style("ok", colours) == colours.good


async def test_no_attempts_yet_says_so() -> None:
    async with hosting() as run:
        screen = await open_advice(run, ScreensControl(advice=[]))
        assert flat(EMPTY) in flat(shown_text(screen.query_one("#advice-table")))


async def test_waiting_then_a_one_line_refusal_and_reload() -> None:
    control = ScreensControl(gate=asyncio.Event())
    async with hosting() as run:
        screen = AdviceScreen(control)  # type: ignore[arg-type]
        run.app.push_screen(screen)
        await run.until(lambda: control.count("lease_advice") == 1, "the read")
        await run.pilot.pause()
        assert WAITING in shown_text(screen.query_one(ReadingLine))
        await run.pilot.press("R")  # not stacked on the read in flight
        assert control.count("lease_advice") == 1
        control.refuse = "reading lease advice: database unavailable: no answer in 3.0 s"
        assert control.gate is not None
        control.gate.set()
        await run.until(lambda: screen.refusal is not None, "the refusal")
        await run.pilot.pause()
        assert shown_text(screen.query_one(ReadingLine)).strip() == (
            "Lease advice: reading lease advice: database unavailable: no answer in 3.0 s"
        )
        control.refuse = None
        await run.pilot.press("f5")
        await run.until(lambda: screen.advice is not None, "the advice")
        await run.pilot.press("q")
        await run.until(lambda: run.app.screen is not screen, "back")


def test_snapshot_80x24(snap_compare: SnapCompare) -> None:
    scene = advice_scene(SMALL)
    assert snap_compare(scene.app, terminal_size=scene.size, run_before=scene.prepare)


def test_snapshot_160x45(snap_compare: SnapCompare) -> None:
    scene = advice_scene(LARGE)
    assert snap_compare(scene.app, terminal_size=scene.size, run_before=scene.prepare)


# --- a real fleet: kinds that take a known time ----------------------------------------

LEASE = 2.0
"""Short, so the long kind's p99 is past half of it."""

SHORT_SECONDS = 0.2
LONG_SECONDS = 1.5
JOBS_PER_KIND = 4


def sleeper(name: str, seconds: float) -> JobKind:
    """A kind whose handler takes `seconds`, checking in with its lease as it goes."""

    async def handler(ctx: JobContext) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (left := deadline - loop.time()) > 0:
            await ctx.checkpoint()
            await asyncio.sleep(min(0.05, left))

    return JobKind(name, lambda payload: dict(payload or {}), handler)


@asynccontextmanager
async def fleet_of(db_url: str, registry: KindRegistry) -> AsyncIterator[Fleet]:
    fleet = Fleet(
        Database(db_url),
        None,
        registry,
        settings=WorkerSettings(
            lease_seconds=LEASE, drain_seconds=0.5, poll_seconds=0.2, retry_base_seconds=0.05
        ),
        name_prefix="advice",
    )
    await fleet.start(2)
    try:
        yield fleet
    finally:
        await fleet.close()


async def test_a_fleet_flags_the_kind_whose_p99_nears_the_lease(db_url: str, conn: Any) -> None:
    registry = KindRegistry()
    registry.register(sleeper("quick", SHORT_SECONDS))
    registry.register(sleeper("slow", LONG_SECONDS))
    async with fleet_of(db_url, registry) as fleet:
        await enqueue_many(
            conn,
            registry,
            [NewJob(kind, {}) for kind in ("quick", "slow") for _ in range(JOBS_PER_KIND)],
        )

        async def advice_for_both() -> list[KindAdvice]:
            deadline = asyncio.get_running_loop().time() + 20
            while True:
                advice = await fleet.lease_advice()
                if sorted((a.kind, a.samples) for a in advice) == [
                    ("quick", JOBS_PER_KIND), ("slow", JOBS_PER_KIND)
                ]:
                    return advice
                assert asyncio.get_running_loop().time() < deadline, advice
                await asyncio.sleep(0.1)

        await advice_for_both()
        async with hosting(size=LARGE) as run:
            screen = await open_advice(run, fleet)
            assert screen.advice is not None
            by_kind = {a.kind: a for a in screen.advice}
            table = shown_text(screen.query_one("#advice-table"))

    quick, slow = by_kind["quick"], by_kind["slow"]
    # Handler durations near the set lengths (checkpoints and scheduling add a little).
    assert SHORT_SECONDS <= quick.p50 <= SHORT_SECONDS + 0.25
    assert SHORT_SECONDS <= quick.p99 <= SHORT_SECONDS + 0.35
    assert LONG_SECONDS <= slow.p50 <= LONG_SECONDS + 0.25
    assert LONG_SECONDS <= slow.p99 <= LONG_SECONDS + 0.35
    assert quick.lease == slow.lease == LEASE
    assert quick.verdict == "ok" and quick.suggested_lease is None
    assert slow.verdict == "too short"
    assert slow.suggested_lease is not None and slow.suggested_lease >= 3 * LONG_SECONDS
    # And the screen says so, row by row.
    rows = {line.split()[0]: flat(line) for line in table.splitlines() if line.strip()}
    assert "ok" in rows["quick"].split()
    assert f"too short {slow.suggested_lease:g} s" in rows["slow"]
