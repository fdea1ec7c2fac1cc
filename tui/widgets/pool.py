"""The pool headroom panel: connection budget of each worker running in this process."""

from __future__ import annotations

from rich.text import Text
from taskboard.core.board import BoardSnapshot, WorkerRow
from taskboard.tui.format import Colours, short
from textual.widgets import Static

RESERVED = 2
"""Connections a worker keeps out of claiming: one for lease renewal, one for control."""


class PoolHeadroom(Static):
    """Per embedded worker: pool in use/max, spare = max - in flight, idle, waiting.

    Spare below the two reserved connections means renewals may queue behind handlers
    (billing waiting on Stripe holds its connection); at zero they will, and leases can
    expire in a live process. Both are called out in words as well as colour.
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Pool headroom"
        self.border_subtitle = f"{RESERVED} reserved each: renew + control"
        self._shown: tuple[object, ...] | None = None

    def show(self, snapshot: BoardSnapshot, colours: Colours) -> None:
        """Render the pools of the embedded workers; skip the repaint when nothing changed."""
        embedded = tuple(w for w in snapshot.workers if w.embedded)
        key = (
            colours,
            *(
                (
                    w.id,
                    w.pool_max,
                    w.pool_in_use,
                    w.pool_idle,
                    w.pool_waiting,
                    w.in_flight,
                    w.capacity,
                )
                for w in embedded
            ),
        )
        if key == self._shown:
            return
        self._shown = key
        if not embedded:
            self.update(Text("No workers run in this process.", colours.muted))
            return
        text = Text()
        for index, worker in enumerate(embedded):
            if index:
                text.append("\n")
            text.append_text(_pool_lines(worker, colours))
        self.update(text)


def _pool_lines(worker: WorkerRow, colours: Colours) -> Text:
    spare = worker.pool_max - worker.in_flight
    if spare <= 0:
        spare_text, spare_style = f"spare {spare} NO HEADROOM", f"bold reverse {colours.bad}"
    elif spare < RESERVED:
        spare_text, spare_style = f"spare {spare} LOW", f"bold {colours.warn}"
    else:
        spare_text, spare_style = f"spare {spare}", colours.good
    waiting_style = f"bold {colours.warn}" if worker.pool_waiting else colours.muted
    return Text.assemble(
        (short(worker.id, 14), "bold"),
        f"  pool {worker.pool_in_use}/{worker.pool_max} · ",
        (spare_text, spare_style),
        "\n  ",
        (f"in flight {worker.in_flight}/{worker.capacity}", ""),
        (f" · idle {worker.pool_idle} · ", colours.muted),
        (f"waiting {worker.pool_waiting}", waiting_style),
    )
