"""`TaskboardApp`: live panels over `BoardSnapshot`s, commands through a `BoardControl`.

The embedded workers run on their own event loop in a thread (`core/runtime/loop_thread.py`), so a
slow frame does not delay their renewals directly; they still share the interpreter lock
with the UI, so the dashboard's own work stays small: one refresh at a time, tables diffed
by key, static panels repainted only when their data changed.

This module holds the app and its panels; the rest is mixed in: the refresh loop and the
one-second health tick from `tui/refresh_loop.py`, the selection and which keys are
available from `tui/key_availability.py` (the keys themselves, with their palette titles
and reasons, are in `tui/actions.py`), what the operator's keys do from
`tui/operator_actions.py` and `tui/enqueue_actions.py`, the training scenario's from
`tui/demo_actions.py`. The
irreversible keys (retry, crash, cancel, demo restart) ask first.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from itertools import count
from typing import ClassVar

from taskboard.core.view.control import BoardControl, Scenario
from taskboard.tui import actions
from taskboard.tui.commands import TaskboardCommands
from taskboard.tui.demo_actions import DemoActions
from taskboard.tui.enqueue_actions import EnqueueActions
from taskboard.tui.format import Colours
from taskboard.tui.key_availability import KeyAvailability
from taskboard.tui.operator_actions import OperatorActions
from taskboard.tui.refresh_loop import TICK_SECONDS, RefreshLoop
from taskboard.tui.widgets.banner import ConnectionBanner, NoWorkerLine, PendingLine
from taskboard.tui.widgets.claims import ClaimsTable
from taskboard.tui.widgets.dead_jobs import DeadJobsTable
from taskboard.tui.widgets.effects import EffectsPanel
from taskboard.tui.widgets.failures import FailuresLog
from taskboard.tui.widgets.footer import TaskboardFooter
from taskboard.tui.widgets.narration import Narration
from taskboard.tui.widgets.pool import PoolHeadroom
from taskboard.tui.widgets.queues import QueuesPanel
from taskboard.tui.widgets.status_line import StatusLine
from taskboard.tui.widgets.trends import TrendsPanel
from taskboard.tui.widgets.workers import WorkersTable
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll


def _utc_now() -> datetime:
    return datetime.now(UTC)


class TaskboardApp(
    RefreshLoop, KeyAvailability, OperatorActions, EnqueueActions, DemoActions, App[None]
):
    """The Taskboard dashboard.

    Args:
        control: the engine side: snapshots come from `control.refresh()`, every key
            press becomes one of its commands, `control.health()` feeds the banner.
        clock: wall clock, used for the age of the data on screen and for how long a
            command has waited (every lease countdown uses `snapshot.db_now`). Injected so
            snapshot tests can freeze it; defaults to UTC now.
        refresh_seconds: pause between the end of one refresh and the start of the next.
        live: False for snapshot tests and screenshots: one refresh on mount, no timer,
            no tick (tests call `tick()`).
        mode_label: shown in the header; empty means the snapshot's own `mode`.
        demo: a training scenario; shows the narration panel and enables `n` and `R`.
        read_only: why nothing may be changed here; every key that would is greyed with it.
    """

    CSS_PATH = "taskboard.tcss"
    TITLE = "Taskboard"
    COMMANDS = App.COMMANDS | {TaskboardCommands}
    # Below 120 columns the side panels move under the main ones and the screen scrolls
    # (beside a side column, the fleet table would have to drop columns); from 160 the
    # side column widens; the footer shows more keys at each step.
    HORIZONTAL_BREAKPOINTS = [
        (0, "-narrow"),
        (120, "-wide"),
        (160, "-full"),
        (200, "-huge"),
    ]

    BINDINGS: ClassVar[list[BindingType]] = list(actions.bindings())

    def __init__(
        self,
        control: BoardControl,
        *,
        clock: Callable[[], datetime] | None = None,
        refresh_seconds: float = 1.0,
        live: bool = True,
        mode_label: str = "",
        demo: Scenario | None = None,
        read_only: str | None = None,
    ) -> None:
        super().__init__()
        if refresh_seconds <= 0:
            raise ValueError("refresh_seconds must be positive")
        self.control = control
        """The engine interface every command goes through."""
        self.demo = demo
        """The training scenario, or None outside demo mode."""
        self.read_only = read_only
        """Why nothing may be changed from this dashboard (a second browser tab); None: it may."""
        self._clock = clock or _utc_now
        self._refresh_seconds = refresh_seconds
        self._live = live
        self._mode_label = mode_label
        self._colours = Colours()
        self.snapshot = None
        """The latest snapshot received, connected or not."""
        self.last_good = None
        """The latest snapshot with `connected=True`: what the panels show."""
        self._last_good_at: datetime | None = None
        self._refreshing = False
        self._refresh_again = False
        self._next_refresh = None
        self._demo_busy = False
        self._heap_frozen = False
        self._bindings_state: tuple[object, ...] = ()
        self._render_errors: set[str] = set()
        self._pending = {}
        self._pending_ids = count()

    # ------------------------------------------------------------------ layout

    # `_narration`, `_workers_table` and `_failures_log` are declared in `ActionHost`, the
    # other panels in `RefreshLoop`: compose builds them all.

    def compose(self) -> ComposeResult:
        """Header line, health banner, waiting commands, narration (demo); the fleet,
        claims, failures and dead jobs on the left, pools, effects, queues and trends on
        the right (stacked below on a narrow terminal); footer."""
        self._status = StatusLine(
            mode_label=self._mode_label, refresh_seconds=self._refresh_seconds, id="status"
        )
        self._banner = ConnectionBanner(id="banner")
        self._pending_line = PendingLine(id="pending")
        self._no_worker = NoWorkerLine(id="no-worker")
        self._narration = Narration(id="narration") if self.demo is not None else None
        self._workers_table = WorkersTable(id="workers")
        self._claims_table = ClaimsTable(id="claims")
        self._failures_log = FailuresLog(id="failures")
        self._pool_panel = PoolHeadroom(id="pool")
        self._effects_panel = EffectsPanel(id="effects")
        self._queues_panel = QueuesPanel(id="queues")
        self._trends_panel = TrendsPanel(id="trends")
        self._dead_table = DeadJobsTable(id="dead")
        yield self._status
        yield self._banner
        yield self._pending_line
        yield self._no_worker
        if self._narration is not None:
            yield self._narration
        with VerticalScroll(id="body") as self._body:
            with Horizontal(id="columns"):
                with Vertical(id="main"):
                    yield self._workers_table
                    yield self._claims_table
                    yield self._failures_log
                    yield self._dead_table
                with Vertical(id="side"):
                    yield self._pool_panel
                    yield self._effects_panel
                    yield self._queues_panel
                    yield self._trends_panel
        yield TaskboardFooter(compact=True)

    def on_mount(self) -> None:
        """Resolve theme colours, focus the fleet, start the refresh loop and the tick."""
        self._colours = Colours.from_theme(self.get_css_variables())
        self.theme_changed_signal.subscribe(self, self._on_theme_changed)
        self._workers_table.focus()
        self._status.show(None, None, self._colours)
        self._render_narration()
        self.request_refresh()
        if self._live:
            self.set_interval(TICK_SECONDS, self.tick)

    def _on_theme_changed(self, _theme: object) -> None:
        self._colours = Colours.from_theme(self.get_css_variables())
        if self.last_good is not None:
            self._show_snapshot(self.last_good)

    # ------------------------------------------------------------------ lifecycle

    def on_unmount(self) -> None:
        """Stop the refresh timer; workers are cancelled by Textual."""
        if self._next_refresh is not None:
            self._next_refresh.stop()
