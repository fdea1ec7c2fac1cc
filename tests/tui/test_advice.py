"""Lease advice: per kind, its policies (lease, timeout, attempts) and fleet limits beside
`taskboard advise`'s verdict and suggestion, the rule in words; and what a real fleet
shows for a kind with its own policies and limit beside one with none."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.fleet import Fleet
from taskboard.core.kinds.registry import JobContext, JobKind, KindRegistry
from taskboard.core.queue.jobs import NewJob, enqueue_many
from taskboard.core.runtime.db import Database
from taskboard.core.view.inspection import lease_advice
from taskboard.core.view.lease_judgement import KindPolicies, judge
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
async def test_each_kind_shows_its_policies_and_limits_beside_the_advice(
    size: tuple[int, int],
) -> None:
    async with hosting(size=size) as run:
        screen = await open_advice(run, ScreensControl())
        text = shown_text(screen.query_one("#advice-table"))
        policies, advice = text.split("Lease advice (taskboard advise)")
        advice = advice.split("\n\n")[0]  # the table, without the notes under it
        rows = {line.split()[0]: flat(line) for line in policies.splitlines()
                if line.strip() and not line.startswith(("Policies", " "))}
        assert rows["billing"] == "billing 60 s workers 30 s 3 2 running 2 5"
        assert rows["email"] == "email 30 s workers none default — — —"
        assert rows["square"] == "square 5 s kind none default 14/s — 312"
        lines = {line.split()[0]: flat(line) for line in advice.splitlines()
                 if line.strip() and not line.startswith(" ")}
        assert lines["billing"].startswith("billing 412 2.40 s 52.0 s 0 s ok —")
        assert lines["email"].startswith("email 2381 0.84 s 4.00 s 16.0 s too short 35 s")
        assert lines["noop"].startswith("noop 9120 0.004 s — — too long 10 s")
        assert lines["square"].startswith("square 0 — — — — —")
        flat_text = flat(text)
        # The reasons (a column when wide, listed under the table when narrow) and, for a
        # lease to change, what sets it.
        assert "a renewal found 4.0 s of 30 s left" in flat_text
        assert "no timings yet" in flat_text
        assert ("set by taskboard worker --lease 30 (its workers' flag); its own: "
                "registry.kind('email', lease_seconds=N)") in flat_text
        assert flat(RULE) in flat(shown_text(screen.query_one("#advice-rule")))
        heading = shown_text(screen.query_one(ReadingLine))
        assert "2 to change" in heading and "317 waiting on a limit" in heading
        # The old single-lease rule is gone: handler durations do not decide.
        assert "over half the lease" not in flat(shown_text(screen))


def test_verdicts_are_coloured_by_what_they_cost() -> None:
    colours = Colours()
    assert colours.bad in verdict_style("too short", colours)
    assert colours.bad in verdict_style("conflict", colours)
    assert colours.warn in verdict_style("too long", colours)
    assert verdict_style("ok", colours) == colours.good


async def test_no_kinds_yet_says_so() -> None:
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


# --- a real fleet: a kind with its own policies and limit beside one with none -----------

LEASE = 2.0
"""The embedded workers' lease: what a kind without its own gets."""

JOBS_PER_KIND = 4
SECONDS = 0.2


def sleeper(name: str, **policies: Any) -> JobKind:
    """A kind whose handler takes `SECONDS`, checking in with its lease as it goes."""

    async def handler(ctx: JobContext) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SECONDS
        while (left := deadline - loop.time()) > 0:
            await ctx.checkpoint()
            await asyncio.sleep(min(0.05, left))

    return JobKind(name, lambda payload: dict(payload or {}), handler, **policies)


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


async def test_a_fleet_shows_each_kinds_policies_its_limit_and_what_advise_says(
    db_url: str, conn: Any
) -> None:
    registry = KindRegistry(builtins=False)
    registry.register(sleeper("plain"))
    registry.register(sleeper("paced", lease_seconds=5, timeout=30, max_attempts=3,
                              max_running=2))
    async with fleet_of(db_url, registry) as fleet:
        await enqueue_many(
            conn, registry,
            [NewJob(kind, {}) for kind in ("plain", "paced") for _ in range(JOBS_PER_KIND)],
        )

        async def timed_both() -> list[KindPolicies]:
            deadline = asyncio.get_running_loop().time() + 20
            while True:
                advice = await fleet.lease_advice()
                samples = sorted((a.kind, a.timings.samples if a.timings else 0) for a in advice)
                if samples == [("paced", JOBS_PER_KIND), ("plain", JOBS_PER_KIND)]:
                    return advice
                assert asyncio.get_running_loop().time() < deadline, advice
                await asyncio.sleep(0.1)

        await timed_both()
        # What `taskboard advise` says of the same kinds, read the way it reads them.
        advised = {r.kind: judge(r, registry.find(r.kind)) for r in await lease_advice(conn)}
        async with hosting(size=LARGE) as run:
            screen = await open_advice(run, fleet)
            assert screen.advice is not None
            by_kind = {a.kind: a for a in screen.advice}
            text = shown_text(screen.query_one("#advice-table"))

    plain, paced = by_kind["plain"], by_kind["paced"]
    assert (plain.lease, plain.own_lease, plain.timeout, plain.max_attempts) == (
        LEASE, False, None, None)
    assert (paced.lease, paced.own_lease, paced.timeout, paced.max_attempts) == (
        5.0, True, 30.0, 3)
    # The limit as the fleet's workers declared it in taskboard_kind_limits.
    assert (paced.max_running, paced.rate_per_second) == (2, None)
    assert (plain.max_running, plain.rate_per_second) == (None, None)
    assert plain.judgement == advised["plain"] and paced.judgement == advised["paced"]
    policies = {line.split()[0]: flat(line) for line in text.split("Lease advice")[0]
                .splitlines() if line.strip()}
    assert policies["paced"] == "paced 5 s kind 30 s 3 2 running 0 0"
    assert policies["plain"] == f"plain {LEASE:g} s workers none default — — —"
