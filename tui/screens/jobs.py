"""Jobs by state: one table per state, filtered by kind, queue, id or error text, sortable.

The list is read through `control.list_jobs` every couple of seconds while the screen is
on top, one read at a time (a slow database stretches the period instead of stacking
reads). Sorting happens here, on the rows on screen; filtering happens in the database, so
a needle finds jobs beyond the ones listed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from rich.text import Text
from taskboard.core.board import JobListRow
from taskboard.core.control import BoardControl
from taskboard.tui.format import Colours, short
from taskboard.tui.screens.job_detail import JobDetailScreen
from taskboard.tui.screens.jobs_bulk import act_on_all
from taskboard.tui.screens.reading import ReadingLine, answer, stamp
from taskboard.tui.widgets.table_sync import Cell, RowDiffer
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Input, Tab, Tabs

STATES = ("pending", "scheduled", "running", "completed", "dead", "cancelled")
"""The states `BoardControl.list_jobs` lists, in the order of the tabs (keys 1 to 6)."""

LIST_LIMIT = 200
"""Rows core returns at most per list (`list_jobs`' limit); a full page says so."""

WIDE = 110
"""From this width the table also shows queue, priority, worker and the date."""

FILTER_PAUSE = 0.3
"""Seconds of no typing before the filter is sent, so each key press is not a query."""

_WHEN: dict[str, str] = {
    "pending": "Due",
    "scheduled": "Runs at",
    "running": "Lease until",
    "completed": "Finished",
    "dead": "Died",
    "cancelled": "Cancelled",
}
"""What the time column holds for each state."""


def _when(row: JobListRow, state: str) -> datetime | None:
    if state in ("pending", "scheduled"):
        return row.run_at
    if state == "running":
        return row.lease_expires_at
    return row.finished_at


# Sort keys: (column key, label, value). None sorts after every value in either direction.
_SORTS: tuple[tuple[str, str], ...] = (
    ("id", "Job"),
    ("kind", "Kind"),
    ("queue", "Queue"),
    ("priority", "Pri"),
    ("attempts", "Att"),
    ("when", "When"),
    ("worker", "Worker"),
    ("error", "Error"),
)


def sort_value(row: JobListRow, column: str, state: str) -> Any:
    """The value rows are ordered by for `column`."""
    values: dict[str, Any] = {
        "id": row.id,
        "kind": row.kind,
        "queue": row.queue,
        "priority": row.priority,
        "attempts": row.attempts,
        "when": _when(row, state),
        "worker": row.claimed_by,
        "error": row.last_error or None,
    }
    return values[column]


def sorted_rows(
    rows: list[JobListRow], column: str | None, descending: bool, state: str
) -> list[JobListRow]:
    """`rows` ordered by `column` (None: as core listed them), empty values last."""
    if column is None:
        return list(rows)
    present = [r for r in rows if sort_value(r, column, state) is not None]
    missing = [r for r in rows if sort_value(r, column, state) is None]
    present.sort(key=lambda r: (sort_value(r, column, state), r.id), reverse=descending)
    return present + missing


class JobsScreen(Screen[None]):
    """Jobs in one state at a time, read through `control.list_jobs`.

    Keys: 1-6 or the tabs pick the state, / filter (Escape clears it), s cycles the sort
    column and S reverses it (or click a header), Enter opens the job, c copies its id,
    A retries (dead, cancelled) or cancels (unfinished) every job of the state and filter,
    after a confirmation stating how many, R/F5 reads now, escape/q back.

    Args:
        control: where the lists come from.
        state: the state shown first (one of `STATES`).
        refresh_seconds: pause between reads while the screen is on top; 0 reads only on
            demand (snapshot tests).
    """

    DEFAULT_CSS = """
    JobsScreen #jobs-table {
        height: 1fr;
    }
    JobsScreen #jobs-filter {
        display: none;
        height: 3;
    }
    JobsScreen #jobs-filter.-shown {
        display: block;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        # Escape clears a filter first (the status line says so while one is set).
        Binding("escape", "escape", "Back", id="jobs-escape"),
        Binding("q", "back", "Back", show=False, id="jobs-back"),
        Binding("slash", "filter", "Filter", id="jobs-filter"),
        Binding("s", "cycle_sort", "Sort", id="jobs-sort"),
        Binding("S", "reverse_sort", "Reverse", show=False, id="jobs-reverse"),
        Binding("c", "copy_id", "Copy id", id="jobs-copy-id"),
        Binding("A", "act_on_all", "Act on all", id="jobs-act-on-all"),
        Binding("R,f5", "reload", "Reload", id="jobs-reload"),
        # One footer entry ("1-6 State") for the six state keys.
        *(
            Binding(str(at), f"show_state('{state}')", "State", show=at == 1,
                    key_display="1-6" if at == 1 else None)
            for at, state in enumerate(STATES, start=1)
        ),
    ]

    def __init__(
        self, control: BoardControl, state: str = "pending", *, refresh_seconds: float = 2.0
    ) -> None:
        super().__init__()
        if state not in STATES:
            raise ValueError(f"state must be one of {', '.join(STATES)}")
        self.control = control
        self.state = state
        """The state listed."""
        self.needle: str | None = None
        """The filter sent with every read (kind, queue, id or error text), or None."""
        self.sort_column: str | None = None
        """The column rows are sorted by on screen; None keeps core's order."""
        self.descending = False
        """Sort direction."""
        self.rows: list[JobListRow] = []
        """The rows of the latest answer for `state` and `needle`, in core's order."""
        self.refusal: str | None = None
        """Why the last read failed, one line; None after a success."""
        self._refresh_seconds = refresh_seconds
        self._reading = False
        self._read_again = False
        self._answered = False
        self._wide: bool | None = None
        self._error_width = 20
        self._differ: RowDiffer | None = None
        self._column_keys: list[str] = []
        self._filter_timer: Timer | None = None
        self._colours = Colours()

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        """State tabs, the filter (hidden until /), the reading line, the table, footer."""
        yield Tabs(
            *(Tab(f"{at} {state}", id=f"tab-{state}") for at, state in enumerate(STATES, 1)),
            active=f"tab-{self.state}",
            id="jobs-tabs",
        )
        box = Input(placeholder="filter: kind, queue, job id or error text (escape clears)",
                    id="jobs-filter")
        box.cursor_blink = False  # a blinking cursor would make every snapshot differ
        yield box
        yield ReadingLine(id="reading")
        table: DataTable[Cell] = DataTable(id="jobs-table", cursor_type="row")
        yield table
        yield Footer(compact=True)

    def on_mount(self) -> None:
        """Resolve colours, lay the columns out for this width, read, start the timer."""
        self._colours = Colours.from_theme(self.app.get_css_variables())
        self.title = "Jobs"
        self.query_one(DataTable).focus()
        self._layout_columns()
        self.action_reload()
        if self._refresh_seconds > 0:
            self.set_interval(self._refresh_seconds, self._tick)

    def on_resize(self, _event: events.Resize) -> None:
        """A new width may change which columns fit and how much error text shows."""
        self._layout_columns()

    @property
    def table(self) -> DataTable[Cell]:
        """The jobs table."""
        return self.query_one("#jobs-table", DataTable)

    def _columns(self) -> list[tuple[str, int]]:
        when = 14 if self._wide else 8
        if self._wide:
            return [("id", 6), ("kind", 10), ("queue", 10), ("priority", 3), ("attempts", 5),
                    ("when", when), ("worker", 12)]
        return [("id", 6), ("kind", 8), ("attempts", 5), ("when", when)]

    def _layout_columns(self, *, force: bool = False) -> None:
        width = self.size.width
        if width <= 0:
            return
        wide = width >= WIDE
        changed = wide != self._wide
        self._wide = wide
        others = sum(w + 2 for _, w in self._columns())
        # What is left after the other columns, their padding, the scrollbar and a margin.
        error_width = max(12, width - others - 2 - 4)
        if not (force or changed) and error_width == self._error_width and self.table.columns:
            return
        self._error_width = error_width
        table = self.table
        selected = self.selected_job_id
        table.clear(columns=True)
        labels = dict(_SORTS)
        for key, w in [*self._columns(), ("error", error_width)]:
            label = _WHEN[self.state] if key == "when" else labels[key]
            if key == self.sort_column:
                label += " ▼" if self.descending else " ▲"
            table.add_column(label, key=key, width=w)
        self._column_keys = [key for key, _ in self._columns()] + ["error"]
        self._differ = RowDiffer(table, self._column_keys)
        self._render_rows(keep=selected)

    # ------------------------------------------------------------------ reading

    @property
    def reading(self) -> bool:
        """True while a read is in flight."""
        return self._reading

    @property
    def answered(self) -> bool:
        """True once a read for the current state and filter has answered."""
        return self._answered

    def _tick(self) -> None:
        # Only while on top: under a job's detail the list would be read for nobody.
        if self.app.screen is self and not self._reading:
            self._read()

    def on_screen_resume(self) -> None:
        """Back from a job's detail: read now, the job may have moved on."""
        if self.is_mounted and not self._reading:
            self._read()

    def action_reload(self) -> None:
        """Read the list now (after the read in flight, if any)."""
        self._read()

    def _read(self) -> None:
        if self._reading:
            self._read_again = True
            return
        self._reading = True
        self._read_again = False
        state, needle = self.state, self.needle
        if not self._answered:
            self.query_one(ReadingLine).waiting(f"Listing {state} jobs")
        self.run_worker(self._read_now(state, needle), group="read", exit_on_error=False)

    async def _read_now(self, state: str, needle: str | None) -> None:
        try:
            rows, refusal = await answer(lambda: self.control.list_jobs(state, needle))
        finally:
            self._reading = False
        if (state, needle) != (self.state, self.needle) or self._read_again:
            # Asked for another state or filter meanwhile: this answer is not what is wanted.
            self.call_later(self._read)
            return
        self.refusal = refusal
        if rows is None:
            self.query_one(ReadingLine).refused(f"Listing {state} jobs", refusal or "no answer")
            return
        self.rows = rows
        self._answered = True
        self._render_rows()

    # ------------------------------------------------------------------ rows

    def _render_rows(self, keep: int | None = None) -> None:
        differ = self._differ
        if differ is None:
            return
        table = self.table
        shown = sorted_rows(self.rows, self.sort_column, self.descending, self.state)
        cells = {str(r.id): self._cells(r) for r in shown}
        if list(cells) != differ.keys:
            # Another order: rebuild, keeping the cursor on the same job.
            selected = self.selected_job_id if keep is None else keep
            table.clear()
            differ = self._differ = RowDiffer(table, self._column_keys)
            differ.apply(cells)
            keys = list(cells)
            if selected is not None and str(selected) in keys:
                table.move_cursor(row=keys.index(str(selected)), animate=False)
        else:
            differ.apply(cells)
        if self._answered or self.rows:
            self.query_one(ReadingLine).status(self._status_text(len(shown)))

    def _cells(self, row: JobListRow) -> list[Cell]:
        colours = self._colours
        moment = _when(row, self.state)
        when = stamp(moment) if not self._wide or moment is None else (
            moment.strftime("%m-%d %H:%M:%S"))
        error = Text(short(row.last_error, self._error_width), colours.bad) if (
            row.last_error) else Text("—", colours.muted)
        cells: list[Cell] = [Text(f"#{row.id}", justify="right"), Text(short(row.kind, 10))]
        if self._wide:
            cells += [Text(short(row.queue, 10)), Text(str(row.priority), justify="right")]
        cells += [Text(f"{row.attempts}/{row.max_attempts}", justify="right"), Text(when)]
        if self._wide:
            cells.append(Text(short(row.claimed_by or "—", 12)))
        cells.append(error)
        return cells

    def _status_text(self, count: int) -> Text:
        colours = self._colours
        text = Text()
        noun = "job" if count == 1 else "jobs"
        if count == 0:
            text.append(f"no {self.state} jobs", colours.muted)
        else:
            full = count >= LIST_LIMIT
            text.append(f"{'first ' if full else ''}{count} {self.state} {noun}", "bold")
        if self.needle:
            text.append(f" matching {self.needle!r}")
            text.append(" (escape clears)", colours.muted)
        if self.sort_column is not None:
            label = dict(_SORTS)[self.sort_column]
            if self.sort_column == "when":
                label = _WHEN[self.state]
            text.append(f" · sorted by {label.lower()} {'▼' if self.descending else '▲'}")
            text.append(" (S reverses)", colours.muted)
        text.append(" · Enter opens a job", colours.muted)
        return text

    @property
    def shown_ids(self) -> list[int]:
        """Job ids in the order the table shows them."""
        return [int(str(key)) for key in (self._differ.keys if self._differ else [])]

    @property
    def selected_job_id(self) -> int | None:
        """The job under the cursor, or None when the table is empty."""
        table = self.table
        if table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return int(str(key)) if key is not None else None

    # ------------------------------------------------------------------ keys

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

    def action_back(self) -> None:
        """Back to the screen underneath."""
        self.dismiss()

    def action_cycle_sort(self) -> None:
        """Sort by the next column (then back to core's order)."""
        keys = [key for key, _ in _SORTS]
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

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter (or a second click) opens the job."""
        event.stop()
        if event.row_key.value is not None:
            self.app.push_screen(JobDetailScreen(self.control, int(str(event.row_key.value))))

    def action_act_on_all(self) -> None:
        """Retry (dead, cancelled) or cancel (unfinished) every job the list's state and
        filter name, after a confirmation that states how many."""
        self.run_worker(act_on_all(self, self), group="bulk", exclusive=True,
                        exit_on_error=False)

    def action_copy_id(self) -> None:
        """Copy the selected job's id."""
        job_id = self.selected_job_id
        if job_id is None:
            self.notify(f"No {self.state} job selected: nothing to copy.",
                        severity="warning", markup=False)
            return
        self.app.copy_to_clipboard(str(job_id))
        self.notify(f"copied job id {job_id}", markup=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """While typing a filter, letters belong to the filter, not to the keys."""
        if isinstance(self.focused, Input) and action not in ("escape",):
            return False
        return True

