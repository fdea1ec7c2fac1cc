"""The workers panel: every worker registered in the database, here or remote."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from taskboard.core.view.board import BoardSnapshot, WorkerRow
from taskboard.tui.actions import INACTIVE_WORKER_STATES
from taskboard.tui.format import AGE_WIDTH, Colours, age, short, worker_state_style
from taskboard.tui.widgets.keyed_table import Column, KeyedTable


class WorkersTable(KeyedTable[WorkerRow]):
    """The fleet, one row per worker keyed by worker id; the cursor row is the worker that
    p, x and d act on while this table has the focus.

    "here" means started by this dashboard (`WorkerRow.embedded`), whether it still runs
    or was crashed or drained; every other worker is "remote". Remote workers that stopped
    or are gone (earlier runs' workers pile up after each start) are collapsed until `h`
    shows them; the title says how many are. The cursor starts on a live worker.
    """

    # Most telling columns first; a narrow table drops where a worker runs and what it
    # runs rather than scroll sideways.
    COLUMNS: ClassVar[tuple[Column, ...]] = (
        Column("worker", "Worker", 12, flex=True),
        Column("where", "Where", 6),
        Column("state", "State", 9),
        Column("flight", "Jobs", 7),
        Column("renewals", "Renew ok/fail", 13),
        Column("heartbeat", "Heartbeat", AGE_WIDTH + 4),
        Column("host", "Host", 14, from_width=90),
        Column("kinds", "Kinds", 16, from_width=120, flex=True),
    )

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, title="Workers")
        self.hide_stopped = True
        """True while remote stopped and gone workers are collapsed (the default; `h`
        shows them)."""
        self._placed = False  # the cursor was put on a live worker once
        self._snapshot: BoardSnapshot | None = None
        self._colours = Colours()

    def show(self, snapshot: BoardSnapshot, colours: Colours) -> None:
        """Render the fleet from one snapshot; heartbeat ages are measured on the DB clock."""
        self._snapshot, self._colours = snapshot, colours
        workers = snapshot.workers
        shown = [w for w in workers if not (self.hide_stopped and _stale(w))]
        self.show_items([(w.id, w) for w in shown])
        if not self._placed:
            live = next((i for i, w in enumerate(shown) if not _inactive(w)), None)
            if live is not None:
                self._placed = True
                self.move_cursor(row=live, animate=False)
        running = sum(1 for w in workers if w.state == "running")
        title = f"Workers · {running}/{len(workers)} running"
        hidden = len(workers) - len(shown)
        if hidden:
            title += f" · {hidden} stopped remote hidden (h shows)"
        self.border_title = title

    def cells(self, item: WorkerRow, widths: dict[str, int]) -> list[Text]:
        """One worker's row."""
        assert self._snapshot is not None
        colours = self._colours
        worker = item
        heartbeat = (self._snapshot.db_now - worker.heartbeat_at).total_seconds()
        # A heartbeat older than a renewal interval is late; older than a lease, the
        # worker's claims are already up for grabs. A stopped worker's is only history.
        if _inactive(worker):
            beat_style = colours.muted
        elif heartbeat > worker.lease_seconds:
            beat_style = f"bold {colours.bad}"
        elif heartbeat > worker.lease_seconds / 3:
            beat_style = colours.warn
        else:
            beat_style = ""
        failed_style = f"bold {colours.bad}" if worker.renewals_failed else colours.muted
        full = worker.in_flight >= worker.capacity > 0
        row = {
            "worker": Text(short(worker.id, widths["worker"])),
            "where": Text("here") if worker.embedded else Text("remote", colours.muted),
            "state": Text(worker.state, worker_state_style(worker.state, colours)),
            "flight": Text(f"{worker.in_flight}/{worker.capacity}", colours.warn if full else ""),
            "renewals": Text.assemble(
                f"{worker.renewals_ok} / ", (str(worker.renewals_failed), failed_style)
            ),
            "heartbeat": Text(f"{age(heartbeat)} ago", beat_style, justify="right"),
            "host": Text(short(worker.host, widths.get("host", 14))),
            "kinds": Text(short(", ".join(worker.kinds), widths.get("kinds", 16)), colours.muted),
        }
        return [row[key] for key in widths]


def _inactive(worker: WorkerRow) -> bool:
    return worker.state in INACTIVE_WORKER_STATES


def _stale(worker: WorkerRow) -> bool:
    # A worker this dashboard started stays in view when it stops: it is part of the story
    # on screen (crashed, drained). Others that stopped are history from earlier runs.
    return _inactive(worker) and not worker.embedded
