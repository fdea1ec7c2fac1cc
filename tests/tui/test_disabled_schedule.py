"""Issue 22 item 3: the dashboard shows a disabled schedule with its error (never crashes on
one), first in the queues panel since it needs an operator."""

from __future__ import annotations

import dataclasses

from taskboard.core.view.board import ScheduleRow
from taskboard.tui.widgets.queues import QueuesPanel

from tests.tui.helpers import running
from tests.tui.sample_board import FixedBoard, at, main_board


async def test_the_queues_panel_shows_a_disabled_schedule_first_with_its_error() -> None:
    board = main_board()
    disabled = ScheduleRow("feb31", "0 0 31 2 *", "noop", "default", None, None,
                           "'0 0 31 2 *' in UTC: CroniterBadDateError: failed to find")
    snapshot = dataclasses.replace(
        board, schedules=(*board.schedules, disabled,
                          ScheduleRow("hourly", "0 * * * *", "noop", "default", None, at(900))))
    async with running(FixedBoard(snapshot)) as run:
        panel = run.app.query_one("#queues", QueuesPanel)
        text = str(panel.render())
    lines = [line for line in text.splitlines() if line.strip()]
    at_disabled = next(i for i, line in enumerate(lines) if "DISABLED feb31" in line)
    assert "CroniterBadDateError" in lines[at_disabled + 1]
    assert at_disabled < next(i for i, line in enumerate(lines) if "hourly" in line)
