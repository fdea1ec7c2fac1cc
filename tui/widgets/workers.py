"""The workers panel: every worker registered in the database, embedded or remote."""

from __future__ import annotations

from rich.text import Text
from taskboard.core.board import BoardSnapshot, WorkerRow
from taskboard.tui.format import Colours, age, short, worker_state_style
from taskboard.tui.widgets.table_sync import Cell, RowDiffer
from textual.widgets import DataTable

# Most telling columns first: on an 80-column terminal the table scrolls sideways and
# where a worker runs matters less than whether it is alive and renewing.
_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("worker", "Worker", 14),
    ("state", "State", 8),
    ("paused", "Paused", 6),
    ("flight", "In flight", 9),
    ("renewals", "Renew ok/fail", 13),
    ("heartbeat", "Heartbeat", 9),
    ("host", "Host", 14),
    ("where", "Where", 6),
)


class WorkersTable(DataTable[Cell]):
    """The fleet, one row per worker keyed by worker id; the cursor row is the selected worker.

    Pause, resume, drain and crash act on the selected worker, so rows are diffed in place
    rather than rebuilt: a rebuild would move the selection under the operator's finger.
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(
            id=id,
            cursor_type="row",
            cursor_foreground_priority="renderable",
        )
        self.border_title = "Workers"
        self._rows = RowDiffer(self, [key for key, _, _ in _COLUMNS])
        self._workers: dict[str, WorkerRow] = {}

    def on_mount(self) -> None:
        """Add the columns; measuring their labels needs the running app."""
        self._ensure_columns()

    def _ensure_columns(self) -> None:
        if not self.columns:
            for key, label, width in _COLUMNS:
                self.add_column(label, key=key, width=width)

    def show(self, snapshot: BoardSnapshot, colours: Colours) -> None:
        """Render the fleet from one snapshot; heartbeat ages are measured on the DB clock."""
        self._ensure_columns()
        self._workers = {worker.id: worker for worker in snapshot.workers}
        self._rows.apply(
            {worker.id: _cells(worker, snapshot, colours) for worker in snapshot.workers}
        )
        running = sum(1 for w in snapshot.workers if w.state == "running")
        self.border_title = f"Workers · {running}/{len(snapshot.workers)} running"

    @property
    def selected(self) -> WorkerRow | None:
        """The worker under the cursor, or None when the fleet is empty."""
        if self.row_count == 0:
            return None
        row_key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return self._workers.get(str(row_key.value))


def _cells(worker: WorkerRow, snapshot: BoardSnapshot, colours: Colours) -> list[Cell]:
    heartbeat = (snapshot.db_now - worker.heartbeat_at).total_seconds()
    # A heartbeat older than a renewal interval is late; older than a lease, the worker's
    # claims are already up for grabs.
    if heartbeat > worker.lease_seconds:
        beat_style = f"bold {colours.bad}"
    elif heartbeat > worker.lease_seconds / 3:
        beat_style = colours.warn
    else:
        beat_style = ""
    failed_style = f"bold {colours.bad}" if worker.renewals_failed else colours.muted
    full = worker.in_flight >= worker.capacity > 0
    return [
        Text(short(worker.id, 14)),
        Text(worker.state, worker_state_style(worker.state, colours)),
        Text("yes", f"bold {colours.warn}")
        if worker.state == "paused"
        else Text("no", colours.muted),
        Text(f"{worker.in_flight}/{worker.capacity}", colours.warn if full else ""),
        Text.assemble(f"{worker.renewals_ok} / ", (str(worker.renewals_failed), failed_style)),
        Text(f"{age(heartbeat)} ago", beat_style, justify="right"),
        Text(short(worker.host, 14)),
        Text("here" if worker.embedded else "remote", "" if worker.embedded else colours.muted),
    ]
