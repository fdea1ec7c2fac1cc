"""The dashboard shows each kind's fleet limit and what waits on it, in the queues panel."""

from __future__ import annotations

import dataclasses

from taskboard.core.view.board import KindLimitRow
from taskboard.tui.widgets.queues import QueuesPanel

from tests.tui.helpers import running
from tests.tui.sample_board import FixedBoard, main_board


async def test_the_queues_panel_says_what_waits_on_each_limit() -> None:
    limits = (KindLimitRow("billing", 2, None, 2, 0), KindLimitRow("email", None, 14.0, 9, 312))
    snapshot = dataclasses.replace(main_board(), limits=limits)
    async with running(FixedBoard(snapshot)) as run:
        text = str(run.app.query_one("#queues", QueuesPanel).render())
    assert "LIMIT billing: at most 2 running (2 now), 0 waiting on the limit" in text
    assert "LIMIT email: 14/s, 312 waiting on the limit" in text
