"""Jobs by state: tabs and keys per state, a filter sent to core, sorting on screen, Enter to
a job's detail, copies, one read at a time, and errors as wide as the screen allows."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from taskboard.tui.screens.job_detail import JobDetailScreen
from taskboard.tui.screens.jobs import JobsScreen
from taskboard.tui.screens.reading import WAITING, ReadingLine
from textual.widgets import Input

from tests.tui.fakes_screens import (
    DECLINED,
    LARGE,
    SMALL,
    Hosted,
    ScreensControl,
    hosting,
    jobs_scene,
    shown_text,
)

SnapCompare = Callable[..., bool]


async def open_jobs(
    run: Hosted, control: ScreensControl, state: str = "dead", refresh: float = 0
) -> JobsScreen:
    screen = JobsScreen(control, state, refresh_seconds=refresh)  # type: ignore[arg-type]
    run.app.push_screen(screen)
    await run.until(lambda: screen.answered and not screen.reading, f"the {state} list")
    await run.pilot.pause()
    return screen


def error_cell(screen: JobsScreen, job_id: int) -> str:
    table = screen.table
    cells = table.get_row(str(job_id))
    return str(cells[-1])


async def test_each_state_has_its_key_and_tab() -> None:
    control = ScreensControl()
    async with hosting() as run:
        screen = await open_jobs(run, control, "pending")
        assert screen.shown_ids == [51, 49, 53]
        await run.pilot.press("5")
        await run.until(lambda: screen.state == "dead" and screen.answered, "the dead list")
        assert screen.shown_ids == [42, 17, 8]
        assert control.sent("list_jobs")[-1] == ("dead", None)
        await run.pilot.click("#tab-running")
        await run.until(lambda: screen.state == "running" and screen.answered, "running jobs")
        assert screen.shown_ids == [23, 31]
        await run.pilot.press("6")
        await run.until(lambda: screen.state == "cancelled" and screen.answered, "cancelled")
        assert screen.shown_ids == []
        assert "no cancelled jobs" in shown_text(screen.query_one(ReadingLine))


async def test_the_filter_narrows_the_rows_and_escape_clears_it() -> None:
    control = ScreensControl()
    async with hosting() as run:
        screen = await open_jobs(run, control, "dead")
        await run.pilot.press("slash")
        assert isinstance(run.app.focused, Input)
        # Letters that are keys elsewhere (s sorts, q leaves, c copies) go into the filter.
        await run.pilot.press("q", "backspace", *"rejected: user", "enter")
        await run.until(lambda: screen.needle == "rejected: user" and screen.answered, "filter")
        assert control.sent("list_jobs")[-1] == ("dead", "rejected: user")
        assert screen.shown_ids == [17]
        assert screen.sort_column is None and run.app.screen is screen
        assert "matching 'rejected: user'" in shown_text(screen.query_one(ReadingLine))

        await run.pilot.press("escape")  # the table has the focus again: clears the filter
        await run.until(lambda: screen.needle is None and screen.answered, "the whole list")
        assert screen.shown_ids == [42, 17, 8]
        assert run.app.screen is screen
        await run.pilot.press("escape")  # nothing left to clear: back
        await run.until(lambda: run.app.screen is not screen, "back")


async def test_the_filter_finds_a_job_by_id_and_escape_in_the_box_clears() -> None:
    control = ScreensControl()
    async with hosting() as run:
        screen = await open_jobs(run, control, "dead")
        await run.pilot.press("slash", "4", "2")
        # Sent once typing pauses, without Enter.
        await run.until(lambda: screen.needle == "42" and screen.answered, "the filter by id")
        assert screen.shown_ids == [42]
        await run.pilot.press("escape")
        await run.until(lambda: screen.needle is None and screen.answered, "the whole list")
        assert screen.shown_ids == [42, 17, 8]
        assert not screen.query_one(Input).value


async def test_sorting_by_key_and_by_header_click_changes_the_order() -> None:
    async with hosting(size=LARGE) as run:
        screen = await open_jobs(run, ScreensControl(), "dead")
        assert screen.shown_ids == [42, 17, 8]  # core's order: newest first
        await run.pilot.press("s")
        assert (screen.sort_column, screen.descending) == ("id", False)
        assert screen.shown_ids == [8, 17, 42]
        await run.pilot.press("S")
        assert screen.shown_ids == [42, 17, 8]
        await run.pilot.press("s")
        assert screen.sort_column == "kind"
        assert screen.shown_ids == [42, 17, 8]  # billing, email, noop
        await run.pilot.press("S")
        assert screen.shown_ids == [8, 17, 42]

        table = screen.table
        attempts = next(c for c in table.ordered_columns if str(c.key.value) == "attempts")
        x = sum(c.get_render_width(table) for c in table.ordered_columns[
            : table.ordered_columns.index(attempts)]) + 1
        await run.pilot.click("#jobs-table", offset=(x, 0))
        assert (screen.sort_column, screen.descending) == ("attempts", False)
        assert screen.shown_ids == [8, 42, 17]  # 1, 3, 5 attempts
        await run.pilot.click("#jobs-table", offset=(x, 0))
        assert screen.shown_ids == [17, 42, 8]
        header = next(c for c in table.ordered_columns if str(c.key.value) == "attempts")
        assert "Att ▼" in str(header.label)


async def test_sorting_keeps_the_cursor_on_the_same_job() -> None:
    async with hosting() as run:
        screen = await open_jobs(run, ScreensControl(), "dead")
        await run.pilot.press("down")
        assert screen.selected_job_id == 17
        await run.pilot.press("s", "S")
        assert screen.selected_job_id == 17


async def test_enter_opens_the_jobs_detail_and_c_copies_its_id() -> None:
    control = ScreensControl()
    async with hosting() as run:
        screen = await open_jobs(run, control, "dead")
        await run.pilot.press("c")
        assert run.app.clipboard == "42"
        assert "copied job id 42" in run.said()
        await run.pilot.press("enter")
        await run.until(lambda: isinstance(run.app.screen, JobDetailScreen), "the detail")
        detail = run.app.screen
        assert isinstance(detail, JobDetailScreen) and detail.job_id == 42
        await run.until(lambda: detail.detail is not None, "the job read")
        await run.pilot.press("escape")
        await run.until(lambda: run.app.screen is screen, "back to the list")


async def test_auto_refresh_reads_one_at_a_time_and_only_while_on_top() -> None:
    control = ScreensControl()
    async with hosting() as run:
        screen = await open_jobs(run, control, "dead", refresh=0.02)
        await run.until(lambda: control.count("list_jobs") >= 3, "refreshes every 0.02 s")

        control.gate = asyncio.Event()  # the next read waits: the database went quiet
        held = control.count("list_jobs") + 1
        await run.until(lambda: control.count("list_jobs") == held, "a read held in flight")
        await run.pilot.pause(0.15)  # 7 periods: none may start beside the one in flight
        assert control.count("list_jobs") == held
        control.gate.set()
        control.gate = None
        await run.until(lambda: control.count("list_jobs") > held + 1, "refreshes resume")

        await run.pilot.press("enter")
        await run.until(lambda: isinstance(run.app.screen, JobDetailScreen), "the detail")
        await run.until(lambda: not screen.reading, "the last list read to end")
        under = control.count("list_jobs")
        await run.pilot.pause(0.15)
        assert control.count("list_jobs") == under  # nobody sees the list under the detail
        await run.pilot.press("escape")
        await run.until(lambda: control.count("list_jobs") > under, "a read on coming back")


async def test_a_database_that_never_answers_shows_waiting_and_keys_still_work() -> None:
    control = ScreensControl(hang=True)
    async with hosting() as run:
        screen = JobsScreen(control, "dead", refresh_seconds=0.02)  # type: ignore[arg-type]
        run.app.push_screen(screen)
        await run.until(lambda: control.count("list_jobs") == 1, "the first read")
        await run.pilot.pause(0.2)
        assert WAITING in shown_text(screen.query_one(ReadingLine))
        assert control.count("list_jobs") == 1
        await run.pilot.press("3")
        assert screen.state == "running"
        await run.pilot.press("escape")
        await run.until(lambda: run.app.screen is not screen, "back")


async def test_a_refusal_is_one_line() -> None:
    control = ScreensControl(refuse="listing dead jobs: database unavailable: no answer in 3.0 s")
    async with hosting() as run:
        screen = JobsScreen(control, "dead", refresh_seconds=0)  # type: ignore[arg-type]
        run.app.push_screen(screen)
        await run.until(lambda: screen.refusal is not None, "the refusal")
        await run.pilot.pause()
        assert shown_text(screen.query_one(ReadingLine)).strip() == (
            "Listing dead jobs: listing dead jobs: database unavailable: no answer in 3.0 s"
        )


async def test_the_error_column_takes_the_width_left_without_sideways_scroll() -> None:
    for size in (SMALL, LARGE):
        async with hosting(size=size) as run:
            screen = await open_jobs(run, ScreensControl(), "dead")
            table = screen.table
            shown = error_cell(screen, 42)
            assert DECLINED.startswith(shown.rstrip("…"))
            assert table.virtual_size.width <= table.size.width
            if size == SMALL:
                assert 30 <= len(shown) < len(DECLINED)
            else:
                assert len(shown) >= 80
    assert table.get_row_at(0)  # the last table still had rows


def test_snapshot_80x24(snap_compare: SnapCompare) -> None:
    scene = jobs_scene(SMALL)
    assert snap_compare(scene.app, terminal_size=scene.size, run_before=scene.prepare)


def test_snapshot_160x45(snap_compare: SnapCompare) -> None:
    scene = jobs_scene(LARGE)
    assert snap_compare(scene.app, terminal_size=scene.size, run_before=scene.prepare)

