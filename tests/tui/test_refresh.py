"""The refresh loop: one refresh at a time, live or once, and an outage that keeps the data."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from taskboard.core.view.board import BoardSnapshot, FailureRow, LinkHealth
from taskboard.tui.widgets.banner import ConnectionBanner
from taskboard.tui.widgets.claims import ClaimsTable
from taskboard.tui.widgets.failures import FailuresLog
from taskboard.tui.widgets.status_line import StatusLine
from taskboard.tui.widgets.table_sync import RowDiffer
from textual.widgets import DataTable

from tests.tui.helpers import running
from tests.tui.sample_board import FixedBoard, at, down, main_board, token


async def until(predicate: Callable[[], bool], what: str, seconds: float = 5.0) -> None:
    """Yield to the loop until `predicate` holds; fail naming `what` after `seconds`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


@dataclass
class GatedBoard(FixedBoard):
    """A board whose refresh waits for the test to open a gate, counting overlaps."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    active: int = 0
    most_active: int = 0

    async def refresh(self) -> BoardSnapshot:
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            await self.gate.wait()
            return await super().refresh()
        finally:
            self.active -= 1


async def test_refreshes_never_overlap_and_a_request_during_one_runs_once_after() -> None:
    board = GatedBoard(main_board())
    async with running(board, settle_first=False) as run:
        await until(lambda: board.active == 1, "the first refresh to start")
        for _ in range(5):
            run.app.request_refresh()
        await run.pilot.pause()
        assert board.most_active == 1
        board.gate.set()
        await until(lambda: board.refreshes == 2 and not run.app.refreshing, "the follow-up")
        await run.pilot.pause()
        # Five requests while busy collapse into one follow-up refresh, never two at once.
        assert board.refreshes == 2
        assert board.most_active == 1


async def test_live_mode_schedules_the_next_refresh_after_each_one() -> None:
    board = FixedBoard(main_board())
    async with running(board, live=True, refresh_seconds=0.01) as run:
        await until(lambda: board.refreshes >= 4, "four refreshes")
        assert run.app.is_running


async def test_not_live_refreshes_exactly_once() -> None:
    board = FixedBoard(main_board())
    async with running(board, live=False) as run:
        for _ in range(5):
            await run.pilot.pause()
        assert board.refreshes == 1


async def test_outage_shows_the_banner_and_keeps_the_last_claims() -> None:
    board = FixedBoard(main_board())
    async with running(board) as run:
        banner = run.app.query_one(ConnectionBanner)
        claims = run.app.query_one(ClaimsTable)
        assert not banner.display
        board.snapshot = replace(down(main_board(), "connection refused"), claims=())
        board.link = LinkHealth(last_answer_age=12.0, last_error="connection refused")
        run.clock.advance(12)
        run.app.request_refresh()
        await run.press()
        assert banner.display
        text = str(banner.render())
        assert "no answer from the database for 12s — data on screen is 12s old" in text
        assert "last error: connection refused" in text
        assert "NO ANSWER 12s" in str(run.app.query_one(StatusLine).render())
        # The outage snapshot carries no claims; the last good ones stay on screen (as
        # many as fit under the banner).
        assert claims.row_count == min(len(main_board().claims), claims.fits) >= 6
        board.snapshot = main_board()
        board.link = LinkHealth(last_answer_age=0.1)
        run.app.request_refresh()
        await run.press()
        assert not banner.display
        assert "● connected" in str(run.app.query_one(StatusLine).render())


async def test_a_refresh_that_raises_is_shown_as_an_outage_and_retried() -> None:
    board = FixedBoard(main_board())

    async def broken() -> BoardSnapshot:
        raise OSError("network is unreachable")

    async with running(board) as run:
        board.refresh = broken  # type: ignore[method-assign]
        run.app.request_refresh()
        await run.press()
        banner = run.app.query_one(ConnectionBanner)
        assert banner.display
        assert "OSError: network is unreachable" in str(banner.render())
        assert run.app.is_running


async def test_failures_are_appended_once_in_time_order() -> None:
    board = FixedBoard(main_board())
    async with running(board) as run:
        log = run.app.query_one(FailuresLog)
        # One line per attempt's lease trouble (issue 26): #1038's renewal failure and lost
        # lease are one.
        assert len(log.lines) == 2
        run.app.request_refresh()
        await run.press()
        assert len(log.lines) == 2, "a refresh with the same failures must not repeat them"
        newer = FailureRow(at(0), 1050, "opsbox-1", token(99), "completion_rejected", "stale")
        snapshot = main_board()
        board.snapshot = replace(snapshot, failures=(newer, *snapshot.failures))
        run.app.request_refresh()
        await run.press()
        assert len(log.lines) == 3
        assert log.lines[-1].job_id == 1050
        assert log.row_count == 3 and log.cursor_row == 2, "the log follows the newest line"


async def test_row_differ_updates_only_the_cells_that_changed() -> None:
    board = FixedBoard(main_board())
    async with running(board) as run:
        table: DataTable[str] = DataTable()
        await run.app.screen.mount(table)
        table.add_column("a", key="a")
        table.add_column("b", key="b")
        differ = RowDiffer(table, ["a", "b"])  # type: ignore[arg-type]
        differ.apply({"1": ["x", "y"], "2": ["p", "q"]})
        updates: list[tuple[str, str]] = []
        original = table.update_cell

        def spy(row: object, column: object, value: object, **kwargs: object) -> None:
            updates.append((str(row), str(column)))
            original(row, column, value, **kwargs)  # type: ignore[arg-type]

        table.update_cell = spy  # type: ignore[method-assign, assignment]
        differ.apply({"1": ["x", "Y"], "3": ["n", "m"]})
        assert updates == [("1", "b")]
        assert differ.keys == ["1", "3"]
        assert table.get_row("1") == ["x", "Y"]


async def test_countdown_follows_the_database_clock_not_the_wall_clock() -> None:
    board = FixedBoard(main_board())
    async with running(board) as run:
        claims = run.app.query_one(ClaimsTable)
        before = str(claims.get_cell("1041", "lease"))
        run.clock.advance(30)  # the wall clock moves: nothing on the lease may change
        run.app.request_refresh()
        await run.press()
        assert str(claims.get_cell("1041", "lease")) == before
        board.snapshot = replace(main_board(), db_now=at(10))
        run.app.request_refresh()
        await run.press()
        assert "42.4s" in str(claims.get_cell("1041", "lease"))
