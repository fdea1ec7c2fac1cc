"""The pool headroom panel: each running worker's connections and the jobs waiting for one.

Every worker of the fleet is listed, here or remote: each reports its pool in its
heartbeat, so the headroom of a worker on another host is as visible as a local one's.
"""

from __future__ import annotations

from rich.text import Text
from taskboard.core.fleet import MAX_RESERVED_CONNECTIONS, MIN_RESERVED_CONNECTIONS
from taskboard.core.view.board import BoardSnapshot, WorkerRow
from taskboard.tui.actions import INACTIVE_WORKER_STATES
from taskboard.tui.format import Colours, short
from textual.widgets import Static


class PoolHeadroom(Static):
    """Per running worker: connections in use of its pool (the reserved engine and control
    connections included), connections free, jobs held of its capacity, and jobs waiting
    for a connection.

    Renewals and control run on the reserved connections, so a full pool no longer starves
    them; it makes jobs of kinds that write to the database wait, which is what "waiting"
    counts and what turns the line yellow, then red when nothing is free.
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Pool headroom · connections"
        # 2, or 3 where the worker has a second engine connection (hosts with 2+ cores).
        self.border_subtitle = (
            f"used incl. {MIN_RESERVED_CONNECTIONS}-{MAX_RESERVED_CONNECTIONS} for engine + control"
        )
        self._shown: tuple[object, ...] | None = None

    def show(self, snapshot: BoardSnapshot, colours: Colours) -> None:
        """Render the pools of the running workers; skip the repaint when nothing changed."""
        running = tuple(w for w in snapshot.workers if w.state not in INACTIVE_WORKER_STATES)
        key = (
            colours,
            *(
                (w.id, w.embedded, w.pool_max, w.pool_in_use, w.pool_waiting, w.in_flight,
                 w.capacity)
                for w in running
            ),
        )
        if key == self._shown:
            return
        self._shown = key
        if not running:
            self.update(Text("No worker is running.", colours.muted))
            return
        text = Text()
        for index, worker in enumerate(running):
            if index:
                text.append("\n")
            text.append_text(pool_lines(worker, colours))
        self.update(text)


def pool_lines(worker: WorkerRow, colours: Colours) -> Text:
    """Two lines for one worker: its connections, then its jobs and who waits."""
    free = max(0, worker.pool_max - worker.pool_in_use)
    if worker.pool_waiting and not free:
        free_text, free_style = "0 free: FULL", f"bold reverse {colours.bad}"
    elif worker.pool_waiting:
        free_text, free_style = f"{free} free", f"bold {colours.warn}"
    else:
        free_text, free_style = f"{free} free", colours.good
    waiting_style = f"bold {colours.warn}" if worker.pool_waiting else colours.muted
    full = worker.in_flight >= worker.capacity > 0
    return Text.assemble(
        (short(worker.id, 14), "bold"),
        (" here " if worker.embedded else " remote ", colours.muted),
        f"{worker.pool_in_use}/{worker.pool_max} used · ",
        (free_text, free_style),
        "\n  jobs ",
        (f"{worker.in_flight}/{worker.capacity}", colours.warn if full else ""),
        " · ",
        (f"{worker.pool_waiting} waiting for a connection", waiting_style),
    )
