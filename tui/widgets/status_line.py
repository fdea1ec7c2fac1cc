"""The header line: which database, its clock, the mode, and whether the last refresh worked.

Our own Static instead of `Header(show_clock=True)`: that clock reads the machine's wall
time, while every deadline on this board is on the database clock, and a wall clock on
screen would also make snapshot tests change every second.
"""

from __future__ import annotations

from rich.text import Text
from taskboard.core.board import BoardSnapshot
from taskboard.tui.format import Colours, clock
from textual.widgets import Static


class StatusLine(Static):
    """One line: connection, DB clock, mode, refresh period, database (password masked)."""

    def __init__(self, *, mode_label: str, refresh_seconds: float, id: str | None = None) -> None:
        super().__init__(id=id)
        self._mode_label = mode_label
        self._refresh_seconds = refresh_seconds
        self._shown: tuple[object, ...] | None = None

    def show(
        self, snapshot: BoardSnapshot | None, last_good: BoardSnapshot | None, colours: Colours
    ) -> None:
        """Render from the latest snapshot; the clock stays at the last good DB time if down."""
        source = last_good or snapshot
        connected = snapshot is not None and snapshot.connected
        key = (
            source.database if source else "",
            source.db_now if source else None,
            (self._mode_label or (source.mode if source else "")),
            connected,
            snapshot is None,
            colours,
        )
        if key == self._shown:
            return
        self._shown = key
        # Most important first: if the line is too long, the DSN is what gets cut.
        text = Text(no_wrap=True, overflow="ellipsis")
        if snapshot is None:
            text.append("○ connecting", colours.muted)
        elif connected:
            text.append("● connected", colours.good)
        else:
            text.append("○ DISCONNECTED", f"bold {colours.bad}")
        if source is not None:
            text.append("  DB ", colours.muted)
            text.append(f"{clock(source.db_now)} UTC", "bold")
            text.append("  mode ", colours.muted)
            text.append(self._mode_label or source.mode)
            text.append(f"  refresh {self._refresh_seconds:g}s  ", colours.muted)
            text.append(source.database)
        self.update(text)
