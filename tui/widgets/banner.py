"""The lines under the header: the database's health, the commands waiting on it, and the
jobs no live worker can run."""

from __future__ import annotations

from rich.text import Text
from taskboard.core.view.board import BoardSnapshot
from taskboard.core.view.no_worker import no_worker_lines
from taskboard.tui.format import Colours
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


class NoWorkerLine(Static):
    """"no live worker works queue 'reports': 12 jobs wait (pdf)" — jobs nothing on the
    fleet can run, which would otherwise wait in the pending count without a word. One line
    (the first of them, and how many more); hidden while every waiting job has a worker."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.display = False
        self._shown: tuple[str, ...] | None = None

    @property
    def lines(self) -> tuple[str, ...]:
        """Every warning shown now (the line holds the first and a count of the rest)."""
        return self._shown or ()

    def show(self, snapshot: BoardSnapshot, colours: Colours) -> None:
        """Say what no live worker can run, or hide."""
        lines = tuple(no_worker_lines(snapshot.orphans))
        key = lines
        if key == self._shown:
            return
        self._shown = key
        self.display = bool(lines)
        if not lines:
            return
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("⚠ ", f"bold {colours.warn}")
        text.append(lines[0], colours.warn)
        if len(lines) > 1:
            text.append(f" · and {len(lines) - 1} more (taskboard status)", colours.muted)
        self.update(text)
