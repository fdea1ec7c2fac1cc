"""The failures log: renewal failures, lost leases, fenced-off completions and cancels."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from taskboard.core.view.board import BoardSnapshot, FailureRow
from taskboard.tui.format import FAILURE_LABELS, Colours, clock, failure_style, short
from taskboard.tui.widgets.keyed_table import Column, KeyedTable

MAX_LINES = 500
"""Lines kept on screen; older ones leave from the top."""


class FailuresLog(KeyedTable[FailureRow]):
    """Each attempt's lease trouble once (its latest stage), and its rejected completion,
    oldest first, newest at the bottom; Enter opens the line's job.

    Every snapshot carries a window of recent failures, most of which are already on
    screen; lines are keyed by attempt, so a refresh appends only new attempts and updates
    the line of one whose trouble moved on, and a line that left the window stays (the log
    is a history, not the window).
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
        # Attempts (job|token) seen with a lease problem, and with a rejected completion:
        # a rejected completion was a lost lease too, so an attempt may be in both.
        self._lease_problems: set[str] = set()
        self._rejected: set[str] = set()

    @property
    def lines(self) -> list[FailureRow]:
        """The failures on screen, oldest first."""
        return list(self._log.values())

    def show(self, snapshot: BoardSnapshot, colours: Colours) -> None:
        """Add the attempts of `snapshot` not shown yet, and bring up to date the line of
        an attempt whose lease trouble moved on (renewal failed, then lease lost; restamped
        when the worker came back): one line per attempt, and one for its rejected
        completion if it had one."""
        fresh = [f for f in snapshot.failures if self._log.get(_key(f)) != f]
        if not fresh and colours == self._colours:
            return
        self._colours = colours
        at_end = self.row_count == 0 or self.cursor_row >= self.row_count - 1
        added = False
        for failure in sorted(fresh, key=lambda f: (f.at, f.job_id, _STAGE.get(f.outcome, 0))):
            key = _key(failure)
            added = added or key not in self._log
            self._log[key] = failure  # an attempt's line keeps its place
            attempt = f"{failure.job_id}|{failure.token}"
            if failure.outcome == "completion_rejected":
                self._rejected.add(attempt)
            else:
                self._lease_problems.add(attempt)
        while len(self._log) > MAX_LINES:
            del self._log[next(iter(self._log))]
        self.show_items(list(self._log.items()))
        if added and at_end:
            # Follow the newest line unless the operator moved up to read an older one.
            self.move_cursor(row=self.row_count - 1, animate=False)
        rejected, lost = len(self._rejected), len(self._lease_problems)
        self.border_subtitle = (
            f"{lost} lease problem{'' if lost == 1 else 's'} · {rejected} rejected "
            f"completion{'' if rejected == 1 else 's'}"
        )

    def clear_log(self) -> None:
        """Forget every line (the demo starts again)."""
        self._log.clear()
        self._lease_problems.clear()
        self._rejected.clear()
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
    # An attempt's lease trouble is one line however it moves on (renewal failed, then
    # lease lost, restamped when the worker came back); keyed by time and outcome, one lost
    # lease became two lines (issue 26). Its rejected completion is a line of its own: the
    # fence's answer to the worker that came back, later.
    family = "rejected" if failure.outcome == "completion_rejected" else "lease"
    return f"{failure.job_id}|{failure.token}|{family}"


# Within one refresh, the later stage of an attempt's lease trouble wins its line.
_STAGE = {"renewal_failed": 0, "lease_lost": 1, "effect_refused": 1, "completion_rejected": 2}
