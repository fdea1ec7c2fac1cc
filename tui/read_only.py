"""A read-only tab: the board of the plain `--serve` while another tab has control.

The first browser tab controls the workers; every later one sees the same board with no
embedded workers of its own and every key that changes anything greyed with the reason
(`actions.Situation.read_only`). The control itself refuses every command as well, so a
key of a screen added later cannot change anything from here either.
"""

from __future__ import annotations

from typing import Any, cast

from taskboard.core.view.control import BoardControl, CommandRefused

READ_ONLY_REASON = (
    "This tab is read-only: another browser tab controls the board. Close that tab and "
    "reload this one to take over."
)

READS = frozenset(
    {"refresh", "embedded_worker_ids", "started_here", "health", "job_detail", "list_jobs",
     "lease_advice", "enqueue_kinds", "payload_problem"}
)
"""What a read-only tab may ask of the control: reads only."""


class ReadOnlyControl:
    """`control`'s reads; every other call is refused with `reason`."""

    def __init__(self, control: BoardControl, reason: str = READ_ONLY_REASON) -> None:
        self._control = control
        self.reason = reason

    def __getattr__(self, name: str) -> Any:
        if name in READS:
            return getattr(self._control, name)
        if name.startswith("_"):
            raise AttributeError(name)

        async def refused(*_args: object, **_kwargs: object) -> Any:
            raise CommandRefused(self.reason)

        return refused


def read_only(control: BoardControl, reason: str = READ_ONLY_REASON) -> BoardControl:
    """`control` seen through a read-only tab."""
    return cast(BoardControl, ReadOnlyControl(control, reason))
