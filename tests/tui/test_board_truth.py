"""A board that never says what is not so (issue 26): small promises of the dashboard."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta
from typing import Any

from taskboard.core.view.board import DeadRow, FailureRow
from taskboard.tui.screens.help import FAILURES_LOG_OUTCOMES
from taskboard.tui.screens.prompt import PromptScreen
from taskboard.tui.screens.reading import ReadingLine
from taskboard.tui.widgets.dead_jobs import DeadJobsTable
from taskboard.tui.widgets.failures import FailuresLog
from taskboard.tui.widgets.workers import WorkersTable

from tests.tui.fakes_screens import ScreensControl, billing_detail, hosting, shown_text
from tests.tui.helpers import running
from tests.tui.sample_board import FixedBoard, main_board
from tests.tui.sample_scenes import settle, wait_for
from tests.tui.test_job_detail import open_detail
from tests.tui.test_keys import select_row


async def test_escape_at_the_pause_reason_pauses_nothing() -> None:
    async with running(FixedBoard(main_board())) as run:
        await run.press("P")
        await wait_for(run.pilot, lambda: isinstance(run.app.screen, PromptScreen), "prompt")
        await run.press(*["backspace"] * 7, *"emails", "enter")
        await wait_for(run.pilot, lambda: isinstance(run.app.screen, PromptScreen)
                       and "Why pause" in run.app.screen.question, "the reason prompt")
        await run.press("escape")
        await wait_for(run.pilot, lambda: len(run.app.screen_stack) == 1, "back")
        assert [c for c, _ in run.board.commands if c == "pause_queue"] == []


# --- 80 columns: nothing cut mid-word (issue 26) -------------------------------------------

SOCKET_DSN = "postgresql://postgres:@/taskboard_demo?host=/tmp/taskboard-demo-8f3k2l/pgdata"


def _screen_lines(run: Any) -> list[str]:
    return [strip.text for strip in run.app.screen._compositor.render_strips()]


def _board_80() -> FixedBoard:
    board = main_board()
    now = board.db_now
    workers = (
        *board.workers[:-1],
        dataclasses.replace(board.workers[-1], state="gone", id="opsbox-3",
                            heartbeat_at=now - timedelta(minutes=14, seconds=3)),
    )
    dead = (DeadRow(21, "email", 5, "SMTP 421 try later", now - timedelta(minutes=15, seconds=27)),
            *board.dead)
    return FixedBoard(dataclasses.replace(board, database=SOCKET_DSN, workers=workers,
                                          dead=dead))


async def test_the_header_names_an_embedded_database_in_whole_words_at_80x24() -> None:
    async with running(_board_80(), size=(80, 24)) as run:
        header = _screen_lines(run)[0]
    assert "taskboard_demo on local socket" in header or "taskboard_demo on socket" in header, (
        header
    )
    assert "…" not in header, header


async def test_a_heartbeat_14_minutes_old_reads_in_full_at_80x24() -> None:
    async with running(_board_80(), size=(80, 24)) as run:
        rows = [line for line in _screen_lines(run) if "opsbox-3" in line]
    assert rows and "14m03s ago" in rows[0], rows


async def test_a_job_dead_15_minutes_reads_in_full_at_80x24() -> None:
    async with running(_board_80(), size=(80, 24)) as run:
        table = run.app.query_one(DeadJobsTable)
        table.scroll_visible(animate=False)
        await run.pilot.pause()
        rows = [line for line in _screen_lines(run) if "#21" in line]
    assert rows and "15m27s ago" in rows[0], rows


async def test_the_claims_title_fits_in_whole_words_at_80x24() -> None:
    async with running(_board_80(), size=(80, 24)) as run:
        top = next(line for line in _screen_lines(run) if "Claims ·" in line)
    assert "…" not in top, top
    assert re.search(r"Claims · \d+ claimed \(\d+ expired\) · \d+ pending", top), top


# --- job detail: what the summary says matches the cards under it ------------------------


async def test_job_detail_counts_claims_beside_attempts_and_names_the_kinds_timeout() -> None:
    """A snooze gave its attempt back: "1 of 2 used" sat above two attempt cards, and a job
    without a timeout of its own read "kind's own" without the value."""
    base = billing_detail()
    detail = dataclasses.replace(
        base, attempts_used=1, max_attempts=2, timeout_seconds=None,
        kind_timeout_seconds=45.0, attempts=base.attempts[:2],
    )
    control = ScreensControl(details={42: detail})
    async with hosting(size=(80, 24)) as run:
        screen = await open_detail(run, control, 42)
        text = " ".join(shown_text(screen.query_one("#summary")).split())
        heading = " ".join(shown_text(screen.query_one(ReadingLine)).split())
    assert "attempts 1 of 2 used · 2 claims" in heading, heading
    assert "attempts 1 of 2 used · 2 claims" in text, text
    assert "45 s (the kind's)" in text, text


# --- the failures log: one line per attempt; the legend lists what the log shows ----------


async def test_one_lost_lease_is_one_line_and_one_lease_problem() -> None:
    """The reclaim ends the attempt `lease_lost`; the paused worker coming back restamps the
    same attempt (RECORD_LOST): keyed by time, that was two lines and "2 lease problems"."""
    board = main_board()
    lost = FailureRow(board.db_now - timedelta(seconds=30), 5, "worker-a", "3e22cce7-0000",
                      "lease_lost", "lease expired: reclaimed by worker-b")
    fixed = FixedBoard(dataclasses.replace(board, failures=(lost,)))
    async with running(fixed, size=(120, 40)) as run:
        log = run.app.query_one(FailuresLog)
        assert log.row_count == 1
        came_back = dataclasses.replace(lost, at=board.db_now, detail="worker came back")
        fixed.snapshot = dataclasses.replace(board, failures=(lost, came_back))
        run.app.request_refresh()
        await settle(run.pilot)
        assert log.row_count == 1
        assert log.lines[0].detail == "worker came back"
        assert str(log.border_subtitle).startswith("1 lease problem · 0 rejected"), (
            log.border_subtitle
        )
        # Its late completion, rejected by the fence, is the story's next line.
        rejected = dataclasses.replace(came_back, outcome="completion_rejected")
        fixed.snapshot = dataclasses.replace(board, failures=(rejected,))
        run.app.request_refresh()
        await settle(run.pilot)
        assert [f.outcome for f in log.lines] == ["lease_lost", "completion_rejected"]
        assert str(log.border_subtitle) == "1 lease problem · 1 rejected completion"


def test_the_legend_lists_under_the_failures_log_only_what_the_log_shows() -> None:
    # LIST_TROUBLE's outcomes (core/sql/board.py): the lease's troubles, nothing else.
    assert set(FAILURES_LOG_OUTCOMES) == {
        "renewal_failed", "lease_lost", "effect_refused", "completion_rejected"
    }
    assert all(f.outcome in FAILURES_LOG_OUTCOMES for f in main_board().failures)


# --- workers that no longer run: keys greyed with the reason, stale ones collapsed --------


async def test_p_on_a_gone_worker_is_greyed_with_the_reason_and_sends_nothing() -> None:
    base = main_board()
    gone = dataclasses.replace(base.workers[2], state="gone")  # batch-07, remote
    board = FixedBoard(dataclasses.replace(base, workers=(*base.workers[:2], gone,
                                                          *base.workers[3:])))
    async with running(board) as run:
        await run.press("h")  # remote gone workers start collapsed
        await select_row(run, WorkersTable, "batch-07")  # type: ignore[arg-type]
        assert run.app.screen.active_bindings["p"].enabled is False
        await run.press("p", "d")
        said = run.said("warning")
        assert len(said) == 2 and all("batch-07 is gone" in m for m in said), said
        assert run.board.commands == []


async def test_the_cursor_starts_on_a_live_worker_below_stale_ones() -> None:
    base = main_board()
    stale = tuple(
        dataclasses.replace(base.workers[2], id=f"old-run-{n}", state=state)
        for n, state in enumerate(("gone", "stopped", "gone"))
    )
    stopped_here = dataclasses.replace(base.workers[3], id="crashed-here")  # embedded
    board = FixedBoard(dataclasses.replace(base, workers=(*stale, stopped_here,
                                                          *base.workers)))
    async with running(board, size=(80, 24)) as run:
        table = run.app.query_one(WorkersTable)
        assert "3 stopped remote hidden" in str(table.border_title)
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        assert key == base.workers[0].id, key
