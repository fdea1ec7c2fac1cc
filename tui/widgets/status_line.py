"""The header line: whether the database answers, its clock, the mode, and which database.

Our own Static instead of `Header(show_clock=True)`: that clock reads the machine's wall
time, while every deadline on this board is on the database clock, and a wall clock on
screen would also make snapshot tests change every second.
"""

from __future__ import annotations

from rich.text import Text
from taskboard.core.view.board import BoardSnapshot
from taskboard.tui.format import Colours, clock, elide_dsn
from textual import events
from textual.widgets import Static


class StatusLine(Static):
    """One line: link state, DB clock, mode, refresh period, database (password masked).

    Says "● connected" only while the database answers: a refresh waiting on a frozen
    server turns it to "○ NO ANSWER 5s" at the app's next tick. The database is elided to
    the width (host:port/database first), never cut off mid-word at the edge.
    """

    def __init__(self, *, mode_label: str, refresh_seconds: float, id: str | None = None) -> None:
        super().__init__(id=id)
        self._mode_label = mode_label
        self._refresh_seconds = refresh_seconds
        self._args: tuple[BoardSnapshot | None, BoardSnapshot | None, Colours, str | None] = (
            None, None, Colours(), None
        )
        self._shown: tuple[object, ...] | None = None

    def show(
        self,
        snapshot: BoardSnapshot | None,
        last_good: BoardSnapshot | None,
        colours: Colours,
        trouble: str | None = None,
    ) -> None:
        """Render from the latest snapshot; the clock stays at the last good DB time if
        down. `trouble` replaces "connected" while the database does not answer, e.g.
        "NO ANSWER 5s"."""
        self._args = (snapshot, last_good, colours, trouble)
        source = last_good or snapshot
        connected = snapshot is not None and snapshot.connected and trouble is None
        width = self.size.width or 200
        key = (
            source.database if source else "",
            source.db_now if source else None,
            (self._mode_label or (source.mode if source else "")),
            connected,
            snapshot is None,
            trouble,
            colours,
            width,
        )
        if key == self._shown:
            return
        self._shown = key
        text = Text(no_wrap=True, overflow="ellipsis")
        if snapshot is None:
            text.append("○ connecting", colours.muted)
        elif connected:
            text.append("● connected", colours.good)
        elif trouble is not None:
            text.append(f"○ {trouble}", f"bold {colours.bad}")
        else:
            text.append("○ DISCONNECTED", f"bold {colours.bad}")
        if source is not None:
            text.append("  DB ", colours.muted)
            text.append(f"{clock(source.db_now)} UTC", "bold")
            text.append("  mode ", colours.muted)
            text.append(self._mode_label or source.mode)
            refresh = f"  refresh {self._refresh_seconds:g}s"
            # The database matters more than the refresh period: drop that before the
            # database has to be shown shorter than it would be without it.
            room = width - len(text) - len(refresh) - 2
            shown = elide_dsn(source.database, max(1, room))
            if shown == elide_dsn(source.database, max(1, room + len(refresh))):
                text.append(refresh, colours.muted)
            text.append("  ")
            text.append(elide_dsn(source.database, max(1, width - len(text))))
        self.update(text)

    def on_resize(self, _event: events.Resize) -> None:
        """Elide the database again for the new width."""
        self.show(*self._args)
