"""The dead jobs panel: jobs that will not be retried unless an operator says so."""

from __future__ import annotations

from rich.text import Text
from taskboard.core.board import BoardSnapshot, DeadRow
from taskboard.tui.format import Colours, short
from taskboard.tui.widgets.table_sync import Cell, RowDiffer
from textual.widgets import DataTable

_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("job", "Job", 6),
    ("kind", "Kind", 7),
    ("error", "Last error", 19),
)


class DeadJobsTable(DataTable[Cell]):
    """Dead jobs keyed by job id; the cursor row is the job `r` retries."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row")
        self.border_title = "Dead jobs"
        self._rows = RowDiffer(self, [key for key, _, _ in _COLUMNS])
        self._dead: dict[str, DeadRow] = {}

    def on_mount(self) -> None:
        """Add the columns; measuring their labels needs the running app."""
        self._ensure_columns()

    def _ensure_columns(self) -> None:
        if not self.columns:
            for key, label, width in _COLUMNS:
                self.add_column(label, key=key, width=width)

    def show(self, snapshot: BoardSnapshot, colours: Colours) -> None:
        """Render the dead jobs of one snapshot."""
        self._ensure_columns()
        self._dead = {str(row.job_id): row for row in snapshot.dead}
        self._rows.apply(
            {
                str(row.job_id): [
                    Text(f"#{row.job_id}", justify="right"),
                    Text(short(row.kind, 7)),
                    Text(short(row.last_error, 19), colours.bad),
                ]
                for row in snapshot.dead
            }
        )
        total = max(snapshot.counts.dead, len(snapshot.dead))
        self.border_title = f"Dead jobs · {total}"

    @property
    def selected(self) -> DeadRow | None:
        """The dead job under the cursor, or None when there is none."""
        if self.row_count == 0:
            return None
        row_key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return self._dead.get(str(row_key.value))
