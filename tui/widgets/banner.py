"""The lines under the header: the database's health, and the commands waiting on it."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class ConnectionBanner(Static):
    """"no answer from the database for N s — data on screen is N s old", over panels that
    keep the last data; hidden while the database answers.

    Driven by the app's one-second tick from `BoardControl.health()` (no I/O), not by the
    refresh: a refresh that waits on a frozen server cannot report anything until it gives
    up, and the operator needs to hear it while it waits.
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.display = False
        self._shown: str | None = None

    @property
    def text(self) -> str | None:
        """What the banner says now, or None while hidden."""
        return self._shown

    def say(self, text: str | None) -> None:
        """Show `text`, or hide the banner for None."""
        if text == self._shown:
            return
        self._shown = text
        self.display = text is not None
        if text is not None:
            self.update(Text(text, "bold"))


class PendingLine(Static):
    """Commands sent by keys that the database keeps waiting: "retrying job #3… waiting for
    the database (2 s)". Hidden while none waits longer than a second."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.display = False
        self._shown: tuple[str, ...] = ()

    @property
    def lines(self) -> tuple[str, ...]:
        """The lines shown now."""
        return self._shown

    def say(self, lines: tuple[str, ...]) -> None:
        """Show one line per waiting command; hide when there is none."""
        if lines == self._shown:
            return
        self._shown = lines
        self.display = bool(lines)
        if lines:
            self.update(Text("\n".join(lines)))
