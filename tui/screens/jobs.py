"""Jobs by state: one table per state, filtered by kind, queue, id or error text, sortable.

The list is read through `control.list_jobs` every couple of seconds while the screen is
on top, one read at a time (a slow database stretches the period instead of stacking
reads). Sorting happens here, on the rows on screen; filtering happens in the database, so
a needle finds jobs beyond the ones listed.
"""

from __future__ import annotations

from typing import ClassVar

from taskboard.core.view.board import JobListRow
from taskboard.core.view.control import BoardControl
from taskboard.tui.format import Colours
from taskboard.tui.screens.job_columns import (
    SORTS,
    STATES,
    WHEN_LABELS,
    WIDE,
    columns,
    list_status,
    row_cells,
    sorted_rows,
)
from taskboard.tui.screens.job_detail import JobDetailScreen
from taskboard.tui.screens.jobs_bulk import act_on_all
from taskboard.tui.screens.jobs_filter import JobFilters
from taskboard.tui.screens.reading import ReadingLine, answer
from taskboard.tui.widgets.table_sync import Cell, RowDiffer
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Input, Tab, Tabs


class JobsScreen(JobFilters, Screen[None]):
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

    def _layout_columns(self, *, force: bool = False) -> None:
        width = self.size.width
        if width <= 0:
            return
        wide = width >= WIDE
        changed = wide != self._wide
        self._wide = wide
        others = sum(w + 2 for _, w in columns(bool(self._wide)))
        # What is left after the other columns, their padding, the scrollbar and a margin.
        error_width = max(12, width - others - 2 - 4)
        if not (force or changed) and error_width == self._error_width and self.table.columns:
            return
        self._error_width = error_width
        table = self.table
        selected = self.selected_job_id
        table.clear(columns=True)
        labels = dict(SORTS)
        for key, w in [*columns(bool(self._wide)), ("error", error_width)]:
            label = WHEN_LABELS[self.state] if key == "when" else labels[key]
            if key == self.sort_column:
                label += " ▼" if self.descending else " ▲"
            table.add_column(label, key=key, width=w)
        self._column_keys = [key for key, _ in columns(bool(self._wide))] + ["error"]
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
        cells = {
            str(r.id): row_cells(r, self.state, wide=bool(self._wide),
                                 error_width=self._error_width, colours=self._colours)
            for r in shown
        }
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
            self.query_one(ReadingLine).status(list_status(
                len(shown), self.state, self.needle, self.sort_column, self.descending,
                self._colours))

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

    def action_back(self) -> None:
        """Back to the screen underneath."""
        self.dismiss()

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
