"""The banner shown while the database cannot be reached."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from taskboard.core.board import BoardSnapshot
from taskboard.tui.format import age
from textual.widgets import Static


class ConnectionBanner(Static):
    """Says "database unreachable — retrying: <error>" over panels that keep the last data.

    Hidden while connected. The age of the data is measured on the injected clock: the
    database clock is exactly what is unavailable here.
    """

    def show(
        self,
        snapshot: BoardSnapshot | None,
        last_good_at: datetime | None,
        now: datetime,
    ) -> None:
        """Show or hide the banner for the latest snapshot."""
        down = snapshot is not None and not snapshot.connected
        self.display = down
        if not down or snapshot is None:
            return
        text = Text("database unreachable — retrying: ", "bold")
        text.append(snapshot.error or "no answer")
        if last_good_at is None:
            text.append("  (no data yet)")
        else:
            seconds = (now - last_good_at).total_seconds()
            text.append(f"  (showing data from {age(seconds)} ago)")
        self.update(text)
