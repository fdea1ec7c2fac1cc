"""`ReadScreen`: a screen over one read of the control (a job, the lease advice, the
queue's health), shared by those screens.

One read at a time: a second press while one is in flight says so instead of stacking
reads on a database that does not answer; the reading line says what is awaited, or why
the read was refused in one line, and the last good answer stays on screen meanwhile.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Generic, TypeVar

from taskboard.core.view.control import BoardControl
from taskboard.tui.format import Colours
from taskboard.tui.screens.reading import ReadingLine, answer
from textual.screen import Screen

T = TypeVar("T")


class ReadScreen(Screen[None], Generic[T]):
    """Reads `read_call()` on `action_reload` (R, F5, or the subclass's timer) and hands a
    successful answer to `show_answer`; escape/q go back (`action_back`).

    Subclasses name what they read (`what`, e.g. "queue health": "Reading queue health",
    "Queue health: <refusal>") and declare their own bindings.
    """

    def __init__(self, control: BoardControl) -> None:
        super().__init__()
        self.control = control
        """Where the read goes."""
        self.refusal: str | None = None
        """Why the last read (or command) failed, one line; None after a success."""
        self._reading = False
        self._colours = Colours()

    @property
    def what(self) -> str:
        """What is read, in lower case ("lease advice", "job #23")."""
        raise NotImplementedError

    def read_call(self) -> Awaitable[T]:
        """The control call that reads it."""
        raise NotImplementedError

    async def show_answer(self, value: T) -> None:
        """Show a successful read."""
        raise NotImplementedError

    @property
    def reading(self) -> bool:
        """True while a read is in flight."""
        return self._reading

    def action_reload(self) -> None:
        """Read again (one read at a time; a second press while waiting says so)."""
        if self._reading:
            self.notify(f"Still waiting for the database (reading {self.what}).")
            return
        self._reading = True
        self.query_one(ReadingLine).waiting(f"Reading {self.what}")
        self.run_worker(self._read(), group="read", exit_on_error=False)

    async def _read(self) -> None:
        try:
            value, refusal = await answer(self.read_call)
        finally:
            self._reading = False
        self.refusal = refusal
        if value is None:
            what = self.what
            self.query_one(ReadingLine).refused(what[:1].upper() + what[1:],
                                                refusal or "no answer")
            return
        await self.show_answer(value)

    def action_back(self) -> None:
        """Back to the screen underneath."""
        self.dismiss()
