"""A job's detail: every attempt with its whole error, copies, confirmed commands, and a
screen that stays usable while the database does not answer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.fleet import Fleet
from taskboard.core.kinds.registry import JobContext, JobKind, KindRegistry
from taskboard.core.queue.jobs import enqueue
from taskboard.core.runtime.db import Database
from taskboard.tui.screens.confirm import ConfirmScreen
from taskboard.tui.screens.job_detail import AttemptCard, JobDetailScreen
from taskboard.tui.screens.reading import WAITING, ReadingLine

from tests.tui.fakes_screens import (
    DECLINED,
    LARGE,
    SMALL,
    Hosted,
    ScreensControl,
    detail_scene,
    hosting,
    shown_text,
    token,
)

SnapCompare = Callable[..., bool]


async def open_detail(run: Hosted, control: ScreensControl, job_id: int) -> JobDetailScreen:
    screen = JobDetailScreen(control, job_id)  # type: ignore[arg-type]
    run.app.push_screen(screen)
    await run.until(lambda: screen.detail is not None and not screen.reading, "the job read")
    await run.pilot.pause()
    return screen


def reading_text(screen: JobDetailScreen) -> str:
    return shown_text(screen.query_one(ReadingLine)).strip()


async def test_every_attempt_is_shown_with_its_whole_error_at_80_columns() -> None:
    control = ScreensControl()
    async with hosting(size=SMALL) as run:
        screen = await open_detail(run, control, 42)
        cards = list(screen.query(AttemptCard))
        assert [c.attempt.ordinal for c in cards] == [1, 2, 3]
        texts = [" ".join(shown_text(c).replace("▊", " ").split()) for c in cards]
        assert "opsbox-1" in texts[0] and "0000000b" in texts[0]
        assert "completion rejected" in texts[0]
        # The late completion's chronology: reclaimed by B before A's completion came back.
        assert "reclaimed 09:17:05.000 by opsbox-2 (#2)" in texts[0]
        assert texts[0].index("reclaimed") < texts[0].index("ended")
        assert "reclaimed from opsbox-1" in texts[1]
        assert "reclaimed from" not in texts[2]  # #2 ended before #3 claimed
        for text in texts[1:]:
            # Wrapped over several lines at 80 columns, never cut: the end is there too.
            assert " ".join(DECLINED.split()) in text
        assert all(c.size.width <= SMALL[0] for c in cards)


async def test_effects_name_whose_records_they_are_and_who_sent_each_copy() -> None:
    async with hosting(size=LARGE) as run:
        screen = await open_detail(run, ScreensControl(), 23)
        effects = shown_text(screen.query_one("#effects"))
        title = shown_text(screen.query_one("#effects-title"))
        assert "this dashboard's SMTP sink" in title
        assert "2 copies of 1 message" in effects
        assert "attempt #1 · opsbox-1" in effects and "attempt #2 · opsbox-2" in effects
        payload = shown_text(screen.query_one("#payload"))
        assert '"api_key": "***"' in payload


async def test_c_copies_the_job_id_and_t_the_selected_attempts_token() -> None:
    async with hosting() as run:
        screen = await open_detail(run, ScreensControl(), 42)
        await run.pilot.press("c")
        assert run.app.clipboard == "42"
        assert "copied job id 42" in run.said()
        await run.pilot.press("t")  # the latest attempt is selected first
        assert run.app.clipboard == token(13)
        await run.pilot.press("up")
        assert screen.selected_attempt is not None and screen.selected_attempt.ordinal == 2
        await run.pilot.press("t")
        assert run.app.clipboard == token(12)
        assert any(m.startswith("copied the token of attempt #2") for m in run.said())


async def test_retry_asks_first_and_retries_only_on_yes() -> None:
    control = ScreensControl()
    async with hosting() as run:
        await open_detail(run, control, 42)
        await run.pilot.press("r")
        await run.until(lambda: isinstance(run.app.screen, ConfirmScreen), "the question")
        question = run.app.screen
        assert isinstance(question, ConfirmScreen)
        assert "#42" in question.question and "charge the customer again" in question.question
        await run.pilot.press("n")
        await run.until(lambda: isinstance(run.app.screen, JobDetailScreen), "back to detail")
        assert control.sent("retry") == []

        await run.pilot.press("r")
        await run.until(lambda: isinstance(run.app.screen, ConfirmScreen), "the question")
        reads = control.count("job_detail")
        await run.pilot.press("y")
        await run.until(lambda: control.count("job_detail") > reads, "a reload after the retry")
        assert control.sent("retry") == [42]
        assert "Job #42 is pending again" in run.said()


async def test_retry_of_a_running_job_says_why_not_without_asking() -> None:
    control = ScreensControl()
    async with hosting() as run:
        await open_detail(run, control, 23)
        await run.pilot.press("r")
        await run.pilot.pause()
        assert isinstance(run.app.screen, JobDetailScreen)
        assert any("is running; only a dead or cancelled job" in m for m in run.said())
        assert control.sent("retry") == []


async def test_cancel_asks_naming_the_job_and_cancels_on_yes() -> None:
    control = ScreensControl()
    async with hosting() as run:
        await open_detail(run, control, 23)
        await run.pilot.press("C")
        await run.until(lambda: isinstance(run.app.screen, ConfirmScreen), "the question")
        assert isinstance(run.app.screen, ConfirmScreen)
        assert "job #23" in run.app.screen.question
        await run.pilot.press("escape")
        await run.until(lambda: isinstance(run.app.screen, JobDetailScreen), "back to detail")
        assert control.sent("cancel_job") == []
        await run.pilot.press("C", "y")
        await run.until(lambda: control.sent("cancel_job") == [23], "the cancel")


async def test_a_database_that_never_answers_leaves_the_screen_usable() -> None:
    control = ScreensControl(hang=True)
    async with hosting(size=SMALL) as run:
        screen = JobDetailScreen(control, 42)  # type: ignore[arg-type]
        run.app.push_screen(screen)
        await run.until(lambda: control.count("job_detail") == 1, "the read to start")
        await run.pilot.pause()
        assert WAITING in reading_text(screen)
        assert screen.reading
        await run.pilot.press("R")  # a second read is not stacked on the hanging one
        assert control.count("job_detail") == 1
        assert any("Still waiting for the database" in m for m in run.said())
        await run.pilot.press("c")  # keys still work
        assert run.app.clipboard == "42"
        await run.pilot.press("escape")
        await run.until(lambda: run.app.screen is not screen, "back to the screen underneath")


async def test_a_refusal_is_shown_in_one_line_and_reload_tries_again() -> None:
    control = ScreensControl(refuse="reading job #42: database unavailable: no answer in 3.0 s")
    async with hosting() as run:
        screen = JobDetailScreen(control, 42)  # type: ignore[arg-type]
        run.app.push_screen(screen)
        await run.until(lambda: screen.refusal is not None, "the refusal")
        await run.pilot.pause()
        assert reading_text(screen) == (
            "Job #42: reading job #42: database unavailable: no answer in 3.0 s"
        )
        control.refuse = None
        await run.pilot.press("f5")
        await run.until(lambda: screen.detail is not None, "the job after the database is back")
        assert "Job #42 · billing on payments · dead" in reading_text(screen)


def test_snapshot_80x24(snap_compare: SnapCompare) -> None:
    scene = detail_scene(SMALL)
    assert snap_compare(scene.app, terminal_size=scene.size, run_before=scene.prepare)


def test_snapshot_160x45(snap_compare: SnapCompare) -> None:
    scene = detail_scene(LARGE)
    assert snap_compare(scene.app, terminal_size=scene.size, run_before=scene.prepare)


def test_snapshot_email_copies_160x45(snap_compare: SnapCompare) -> None:
    scene = detail_scene(LARGE, 23, "job-detail-email")
    assert snap_compare(scene.app, terminal_size=scene.size, run_before=scene.prepare)


# --- a real fleet: a job that failed once, then completed ------------------------------

FIRST_TRY = (
    "the payment provider answered 503 Service Unavailable after 2.4 s; upstream said: "
    "'maintenance window in progress for region eu-west-1, retry later' (request "
    "req_0f3c9a) — FIRST-TRY-END"
)


def flaky_registry() -> KindRegistry:
    """A kind whose first attempt fails with a long error and whose second completes."""

    async def handler(ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise RuntimeError(FIRST_TRY)

    registry = KindRegistry()
    registry.register(JobKind("flaky", lambda payload: dict(payload or {}), handler))
    return registry


async def test_a_job_that_failed_once_then_completed_shows_both_attempts(
    db_url: str, conn: Any
) -> None:
    registry = flaky_registry()
    fleet = Fleet(
        Database(db_url),
        None,
        registry,
        settings=WorkerSettings(
            lease_seconds=2.0, drain_seconds=0.5, poll_seconds=0.2, retry_base_seconds=0.05
        ),
        name_prefix="detail",
    )
    await fleet.start(1)
    try:
        job_id = await enqueue(conn, registry, "flaky", {"order": 7731, "card_token": "tok_x"})
        deadline = asyncio.get_running_loop().time() + 20
        while (await fleet.job_detail(job_id)).state != "completed":
            assert asyncio.get_running_loop().time() < deadline, "the job never completed"
            await asyncio.sleep(0.05)
        async with hosting(size=SMALL) as run:
            screen = await open_detail(run, fleet, job_id)  # type: ignore[arg-type]
            cards = list(screen.query(AttemptCard))
            texts = [" ".join(shown_text(c).replace("▊", " ").split()) for c in cards]
            heading = reading_text(screen)
            payload = shown_text(screen.query_one("#payload"))
    finally:
        await fleet.close()

    assert f"Job #{job_id} · flaky on default · completed" in heading
    assert [c.attempt.ordinal for c in cards] == [1, 2]
    assert [c.attempt.outcome for c in cards] == ["failed", "completed"]
    assert cards[0].attempt.token != cards[1].attempt.token
    # The whole error, wrapped over several lines at 80 columns, to its last word.
    assert f"error: RuntimeError: {FIRST_TRY}" in texts[0]
    assert "error:" not in texts[1] and "completed" in texts[1]
    assert '"card_token": "***"' in payload
