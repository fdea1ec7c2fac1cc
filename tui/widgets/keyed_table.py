"""`KeyedTable`: the one base of the dashboard's tables (workers, claims, dead jobs, failures).

Each table shows domain rows keyed by id (worker id, job id, failure), diffed in place by
`RowDiffer` so the operator's cursor never jumps; its columns come from one declaration
that says which columns a narrow table drops and which one takes the width left over, so
the workers table never scrolls sideways at 80 columns and an error column is as wide as
the panel allows. The cursor is shown only while the table has the focus: the keys act on
the focused table's row only, and a highlighted row elsewhere would suggest otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from taskboard.tui.widgets.table_sync import Cell, RowDiffer
from textual import events
from textual.widgets import DataTable

R = TypeVar("R")

# Room kept for the vertical scrollbar, so a table that starts scrolling does not push its
# last column out of sight (`scrollbar-gutter: stable` would do it, but it also adds an empty
# line to a table whose height is auto).
_GUTTER = 2


@dataclass(frozen=True)
class Column:
    """One column: its key, label and width; shown only in tables at least `from_width`
    and less than `until_width` wide (a narrow variant of a column shares its key); `flex`
    takes the width the other columns leave (at least `width`)."""

    key: str
    label: str
    width: int
    from_width: int = 0
    flex: bool = False
    until_width: int = 0

    def fits(self, inner: int) -> bool:
        """Shown in a table `inner` cells wide (0: not laid out yet, the wide variant)."""
        if not inner:
            return not self.until_width
        return inner >= self.from_width and (not self.until_width or inner < self.until_width)


class KeyedTable(DataTable[Cell], Generic[R]):
    """A DataTable of keyed rows; subclasses declare `COLUMNS` and build `cells`."""

    COLUMNS: ClassVar[tuple[Column, ...]] = ()

    def __init__(self, *, id: str | None = None, title: str = "") -> None:
        super().__init__(
            id=id, cursor_type="row", cursor_foreground_priority="renderable", show_cursor=False
        )
        self.border_title = title
        self._layout: tuple[tuple[Column, int], ...] = ()
        self._rows: RowDiffer = RowDiffer(self, [])
        self._items: dict[str, R] = {}
        self._order: list[str] = []

    # --- what subclasses provide ---------------------------------------------------------

    def cells(self, item: R, widths: dict[str, int]) -> Sequence[Cell]:
        """The cells of one row for the visible columns (`widths`: key -> cells wide)."""
        raise NotImplementedError

    # --- rows ------------------------------------------------------------------------------

    def show_items(self, items: Sequence[tuple[str, R]]) -> None:
        """Make the table show exactly `items` (key, row), in this order."""
        self._ensure_layout()
        selected = self._selected_key()
        self._items = dict(items)
        self._order = [key for key, _ in items]
        widths = self.widths
        rows = {key: self.cells(item, widths) for key, item in items}
        self._rows.apply(rows)
        if self._rows.keys != self._order:
            # New rows are appended, so a row whose place changed (a renewed lease moves
            # down the claims) needs the rows laid out again to keep the stated order.
            self.clear()
            self._rows = RowDiffer(self, [column.key for column, _ in self._layout])
            self._rows.apply(rows)
        self._keep_cursor_on(selected)

    @property
    def selected(self) -> R | None:
        """The row under the cursor, or None when the table is empty."""
        if self.row_count == 0:
            return None
        row_key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return self._items.get(str(row_key.value))

    @property
    def widths(self) -> dict[str, int]:
        """Cells per visible column, by key."""
        return {column.key: width for column, width in self._layout}

    # --- columns that follow the width -----------------------------------------------------

    def _plan(self) -> tuple[tuple[Column, int], ...]:
        # `size` is inside the border already.
        inner = self.size.width - _GUTTER if self.size.width else 0
        shown = [c for c in self.COLUMNS if c.fits(inner)]
        fixed = sum(c.width + 2 * self.cell_padding for c in shown if not c.flex)
        flex = [c for c in shown if c.flex]
        spare = inner - fixed - sum(2 * self.cell_padding for _ in flex) if inner else 0
        share = spare // len(flex) if flex and spare > 0 else 0
        return tuple((c, max(c.width, share) if c.flex else c.width) for c in shown)

    def _ensure_layout(self) -> None:
        plan = self._plan()
        if plan == self._layout and self.columns:
            return
        selected = self._selected_key()
        self._layout = plan
        self.clear(columns=True)
        for column, width in plan:
            self.add_column(column.label, key=column.key, width=width)
        self._rows = RowDiffer(self, [column.key for column, _ in plan])
        if self._items:
            widths = self.widths
            self._rows.apply({k: self.cells(self._items[k], widths) for k in self._order})
            self._keep_cursor_on(selected)

    def _keep_cursor_on(self, key: str | None) -> None:
        # Rows removed above the cursor would otherwise slide another row under it, and
        # the next key press would act on a worker or job the operator never chose.
        if key is not None and key in self._items:
            index = self.get_row_index(key)
            if index != self.cursor_row:
                self.move_cursor(row=index, animate=False)

    def _selected_key(self) -> str | None:
        if self.row_count == 0:
            return None
        return str(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)

    def on_mount(self) -> None:
        """Add the columns; measuring their labels needs the running app."""
        self._ensure_layout()

    def on_resize(self, _event: events.Resize) -> None:
        """Drop or restore columns and widen the flexible one for the new width."""
        self._ensure_layout()

    def on_focus(self, _event: events.Focus) -> None:
        """Show the cursor: keys now act on this table's row."""
        self.show_cursor = True

    def on_blur(self, _event: events.Blur) -> None:
        """Hide the cursor: keys no longer act on this table."""
        self.show_cursor = False
