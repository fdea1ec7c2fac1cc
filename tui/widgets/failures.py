"""The failures log: renewal failures, lost leases, fenced-off completions and cancels."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from taskboard.core.board import BoardSnapshot, FailureRow
from taskboard.tui.format import FAILURE_LABELS, Colours, clock, failure_style, short
from taskboard.tui.widgets.keyed_table import Column, KeyedTable

MAX_LINES = 500
"""Lines kept on screen; older ones leave from the top."""


class FailuresLog(KeyedTable[FailureRow]):
    """Each failure once, oldest first, newest at the bottom; Enter opens the line's job.

    Every snapshot carries a window of recent failures, most of which are already on
    screen; lines are keyed, so a refresh appends only the new ones, and a line that left
    the window stays (the log is a history, not the window).
    """

    COLUMNS: ClassVar[tuple[Column, ...]] = (
        Column("at", "Time", 8),
        Column("what", "What", 19),
        Column("job", "Job", 6),
        Column("worker", "Worker", 12, from_width=60),
        Column("token", "Token", 8, from_width=80),
        Column("detail", "Detail", 12, flex=True),
    )

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, title="Renewal failures · lost leases · rejected completions")
        self._log: dict[str, FailureRow] = {}
        self._colours = Colours()
        self._counts: dict[str, int] = {}

    @property
    def lines(self) -> list[FailureRow]:
        """The failures on screen, oldest first."""
        return list(self._log.values())

    def show(self, snapshot: BoardSnapshot, colours: Colours) -> None:
        """Append the failures of `snapshot` not shown yet, in time order."""
        fresh = [f for f in snapshot.failures if _key(f) not in self._log]
        if not fresh and colours == self._colours:
            return
        self._colours = colours
        at_end = self.row_count == 0 or self.cursor_row >= self.row_count - 1
        for failure in sorted(fresh, key=lambda f: (f.at, f.job_id)):
            self._log[_key(failure)] = failure
            self._counts[failure.outcome] = self._counts.get(failure.outcome, 0) + 1
        while len(self._log) > MAX_LINES:
            del self._log[next(iter(self._log))]
        self.show_items(list(self._log.items()))
        if fresh and at_end:
            # Follow the newest line unless the operator moved up to read an older one.
            self.move_cursor(row=self.row_count - 1, animate=False)
        rejected = self._counts.get("completion_rejected", 0)
        lost = self._counts.get("lease_lost", 0) + self._counts.get("renewal_failed", 0)
        subtitle = (
            f"{lost} lease problem{'' if lost == 1 else 's'} · {rejected} rejected "
            f"completion{'' if rejected == 1 else 's'}"
        )
        if self._counts.get("cancelled"):
            subtitle += f" · {self._counts['cancelled']} cancelled"
        self.border_subtitle = subtitle

    def clear_log(self) -> None:
        """Forget every line (the demo starts again)."""
        self._log.clear()
        self._counts.clear()
        self.show_items([])
        self.border_subtitle = ""

    def cells(self, item: FailureRow, widths: dict[str, int]) -> list[Text]:
        """One failure's line."""
        colours = self._colours
        label = FAILURE_LABELS.get(item.outcome, item.outcome.replace("_", " "))
        row = {
            "at": Text(clock(item.at), colours.muted),
            "what": Text(short(label, widths["what"]), failure_style(item.outcome, colours)),
            "job": Text(f"#{item.job_id}", justify="right"),
            "worker": Text(short(item.worker_id, widths.get("worker", 12))),
            "token": Text(item.token.replace("-", "")[:8] or "-", colours.muted),
            "detail": Text(short(item.detail, widths["detail"]), colours.muted),
        }
        return [row[key] for key in widths]


def _key(failure: FailureRow) -> str:
    # (at, job, token, outcome): what makes a failure line the same line across refreshes.
    return f"{failure.at.isoformat()}|{failure.job_id}|{failure.token}|{failure.outcome}"
