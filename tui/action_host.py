"""`ActionHost`: what the action mixins (`operator_actions.py`, `enqueue_actions.py`,
`demo_actions.py`) may use of `TaskboardApp`, declared once.

At run time it is a plain base whose only behaviour is `notify_failure` (how both mixins
report a command that did not go through): `TaskboardApp` builds every attribute named
here (in `__init__` or `compose`) and defines every other method, and Textual finds the
mixins' `action_*` methods through the app's MRO. For mypy it is an `App`, so the mixins
type-check against Textual's API and against these declarations; an app that stopped
providing one of them fails type-checking, not at the first key press.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from itertools import count
from typing import TYPE_CHECKING, TypeVar

from taskboard.core.view.board import BoardSnapshot, WorkerRow
from taskboard.core.view.control import BoardControl, CommandRefused, Scenario
from taskboard.tui.actions import JobRef
from taskboard.tui.format import Colours
from taskboard.tui.widgets.failures import FailuresLog
from taskboard.tui.widgets.narration import Narration
from taskboard.tui.widgets.workers import WorkersTable

T = TypeVar("T")

if TYPE_CHECKING:
    from textual.app import App

    _Base = App[None]
else:
    _Base = object


class ActionHost(_Base):
    """The app's state and methods the action mixins rely on (see `TaskboardApp`)."""

    control: BoardControl
    demo: Scenario | None
    snapshot: BoardSnapshot | None
    last_good: BoardSnapshot | None
    _clock: Callable[[], datetime]
    _colours: Colours
    _demo_busy: bool
    # Commands sent and not answered yet, by ticket: what they do and since when.
    _pending: dict[int, tuple[str, datetime]]
    _pending_ids: count[int]
    _workers_table: WorkersTable
    _failures_log: FailuresLog
    _narration: Narration | None

    def notify_failure(self, err: Exception, title: str) -> None:
        """A refusal (the command was understood and declined) as a warning in its own
        words; anything else as an error with its type, under `title`."""
        if isinstance(err, CommandRefused):
            self.notify(str(err), severity="warning", markup=False)
        else:
            self.notify(f"{type(err).__name__}: {err}", title=title, severity="error",
                        markup=False)

    if TYPE_CHECKING:
        # Defined by TaskboardApp, or by `OperatorActions` (`_send`, `_confirm`).

        @property
        def selected_worker(self) -> WorkerRow | None: ...

        @property
        def selected_job(self) -> JobRef | None: ...

        def request_refresh(self) -> None: ...

        def tick(self) -> None: ...

        def _update_bindings(self) -> None: ...

        def _confirm(self, question: str, yes: str, then: Callable[[], None]) -> None: ...

        def _send(
            self, what: str, command: Callable[[], Awaitable[T]], done: Callable[[T], str]
        ) -> None: ...
