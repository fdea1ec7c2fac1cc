"""The failures log: renewal failures, lost leases and fenced-off completions, with times."""

from __future__ import annotations

from collections import deque
from datetime import datetime

from rich.table import Table
from rich.text import Text
from taskboard.core.board import BoardSnapshot, FailureRow
from taskboard.tui.format import FAILURE_LABELS, Colours, clock, failure_style, short
from textual.widgets import RichLog

FailureKey = tuple[datetime, int, str, str]
"""(at, job id, token, outcome): what makes a failure line the same line across refreshes."""

MAX_LINES = 500
"""Lines kept on screen; older ones scroll away."""


class FailuresLog(RichLog):
    """Appends each failure once, oldest first, newest at the bottom.

    Every snapshot carries a window of recent failures, most of which are already on
    screen; lines are keyed so a refresh appends only the new ones instead of redrawing.
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, max_lines=MAX_LINES, min_width=20, markup=False, auto_scroll=True)
        self.border_title = "Renewal failures · lost leases · rejected completions"
        # Remember more keys than lines shown: a failure that scrolled off must still not
        # come back when an older snapshot window repeats it.
        self._order: deque[FailureKey] = deque()
        self._seen: set[FailureKey] = set()
        self._counts: dict[str, int] = {}

    def show(self, snapshot: BoardSnapshot, colours: Colours) -> None:
        """Append the failures of `snapshot` not shown yet, in time order."""
        fresh = [f for f in snapshot.failures if _key(f) not in self._seen]
        for failure in sorted(fresh, key=lambda f: (f.at, f.job_id)):
            self._remember(_key(failure))
            self._counts[failure.outcome] = self._counts.get(failure.outcome, 0) + 1
            self.write(_line(failure, colours), expand=True)
        if fresh:
            rejected = self._counts.get("completion_rejected", 0)
            lost = self._counts.get("lease_lost", 0) + self._counts.get("renewal_failed", 0)
            self.border_subtitle = f"{lost} lease problems · {rejected} rejected completions"

    def _remember(self, key: FailureKey) -> None:
        self._seen.add(key)
        self._order.append(key)
        if len(self._order) > 4 * MAX_LINES:
            self._seen.discard(self._order.popleft())


def _key(failure: FailureRow) -> FailureKey:
    return (failure.at, failure.job_id, failure.token, failure.outcome)


def _line(failure: FailureRow, colours: Colours) -> Table:
    # A time column plus one wrapping column: a long detail continues under the entry's
    # text with a hanging indent, so it never reads as another timestamped entry.
    label = FAILURE_LABELS.get(failure.outcome, failure.outcome.replace("_", " "))
    token = failure.token.replace("-", "")[:8] or "-"
    entry = Text.assemble(
        (f"{label:<19}", failure_style(failure.outcome, colours)),
        f" #{failure.job_id:<5} {short(failure.worker_id, 12):<12} ",
        ("token ", colours.muted),
        token,
    )
    if failure.detail:
        entry.append(f"  {failure.detail}", colours.muted)
    grid = Table.grid(padding=(0, 1), expand=True)
    grid.add_column(width=8, style=colours.muted, no_wrap=True)
    grid.add_column(ratio=1, overflow="fold")
    grid.add_row(clock(failure.at), entry)
    return grid
