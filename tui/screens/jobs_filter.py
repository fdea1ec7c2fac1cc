"""`JobFilters`: which jobs the jobs screen lists and in which order, mixed into
`JobsScreen`: the state tabs, the filter box and the sort keys.

The state and the filter are sent to the database (a needle finds jobs beyond the ones
listed; the filter once typing pauses); sorting happens on the rows on screen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taskboard.core.view.board import JobListRow
from taskboard.tui.screens.job_columns import SORTS, STATES
from taskboard.tui.screens.reading import ReadingLine
from textual.timer import Timer
from textual.widgets import DataTable, Input, Tabs

if TYPE_CHECKING:
    from taskboard.tui.widgets.table_sync import Cell
    from textual.screen import Screen

    _Base = Screen[None]
else:
    _Base = object

FILTER_PAUSE = 0.3
"""Seconds of no typing before the filter is sent, so each key press is not a query."""


class JobFilters(_Base):
    """1-6 or a tab pick the state, / filter (Escape clears it), s cycles the sort column,
    S reverses it, a click on a header sorts by it; while the filter box has the focus,
    letters are the filter's."""

    state: str
    rows: list[JobListRow]
    needle: str | None
    sort_column: str | None
    descending: bool
    _answered: bool
    _filter_timer: Timer | None

    if TYPE_CHECKING:
        # Defined by `JobsScreen`.
        @property
        def table(self) -> DataTable[Cell]: ...

        def _read(self) -> None: ...

        def _layout_columns(self, *, force: bool = False) -> None: ...

    def action_show_state(self, state: str) -> None:
        """List another state (keys 1 to 6, or a tab)."""
        self.query_one(Tabs).active = f"tab-{state}"

    def on_tabs_tab_activated(self, event: Tabs.TabActivated) -> None:
        """A tab was picked: list its state."""
        if event.tab is None or event.tab.id is None:
            return
        state = event.tab.id.removeprefix("tab-")
        if state == self.state or state not in STATES:
            return
        self.state = state
        self.rows = []
        self._answered = False
        if self.sort_column == "when":
            self.sort_column = None  # the time column means something else in each state
        self._layout_columns(force=True)
        self.query_one(ReadingLine).waiting(f"Listing {state} jobs")
        self._read()
        self.table.focus()

    def action_filter(self) -> None:
        """Show the filter box and type into it."""
        box = self.query_one(Input)
        box.add_class("-shown")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        """Send the filter once typing pauses."""
        if self._filter_timer is not None:
            self._filter_timer.stop()
        self._filter_timer = self.set_timer(FILTER_PAUSE, lambda: self._apply(event.value))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: filter now and go back to the table."""
        if self._filter_timer is not None:
            self._filter_timer.stop()
        self._apply(event.value)
        self.table.focus()

    def _apply(self, value: str) -> None:
        needle = value.strip() or None
        if needle == self.needle:
            return
        self.needle = needle
        self._answered = False
        self.query_one(ReadingLine).waiting(
            f"Listing {self.state} jobs matching {needle!r}" if needle else
            f"Listing {self.state} jobs"
        )
        self._read()

    def action_escape(self) -> None:
        """Clear the filter if there is one; otherwise go back."""
        box = self.query_one(Input)
        if self.needle is not None or box.has_class("-shown"):
            if self._filter_timer is not None:
                self._filter_timer.stop()
            box.value = ""
            box.remove_class("-shown")
            self.table.focus()
            self._apply("")
            return
        self.dismiss()

    def action_cycle_sort(self) -> None:
        """Sort by the next column (then back to core's order)."""
        keys = [key for key, _ in SORTS]
        if self.sort_column is None:
            self._sort_by(keys[0], descending=False)
        else:
            at = keys.index(self.sort_column) + 1
            self._sort_by(keys[at] if at < len(keys) else None, descending=False)

    def action_reverse_sort(self) -> None:
        """Reverse the sort direction (sorting by job id first if unsorted)."""
        self._sort_by(self.sort_column or "id", descending=not self.descending)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        """A click on a header sorts by it; a second click reverses."""
        column = str(event.column_key.value)
        same = column == self.sort_column
        self._sort_by(column, descending=not self.descending if same else False)

    def _sort_by(self, column: str | None, *, descending: bool) -> None:
        self.sort_column = column
        self.descending = descending
        self._layout_columns(force=True)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """While typing a filter, letters belong to the filter, not to the keys."""
        if isinstance(self.focused, Input) and action not in ("escape",):
            return False
        return True
