"""`TaskboardApp`: live panels over `BoardSnapshot`s, commands through a `BoardControl`.

The embedded workers run on their own event loop in a thread (`core/loop_thread.py`), so a
slow frame does not delay their renewals directly; they still share the interpreter lock
with the UI, so the dashboard's own work stays small: one refresh at a time (the next one
is scheduled only after the previous one rendered, so a slow database stretches the period
instead of stacking refreshes), tables diffed by key, static panels repainted only when
their data changed.

Two clocks drive the screen. The refresh draws each snapshot; a one-second tick reads
`control.health()` (no I/O) and says, while a refresh or a command is still waiting on a
database that does not answer, how long it has been silent and how old the data on screen
is. Keys come from `tui/actions.py`, which holds their bindings, palette titles and the
reason each is unavailable; keys that act on a row act on the focused table's row only,
and the irreversible ones (retry, crash, cancel, demo restart) ask first. What the keys
do is mixed in: the operator's from `tui/operator_actions.py`, the training scenario's
from `tui/demo_actions.py`; this module holds the app, its panels, the refresh loop,
the health tick, the selection and which keys are available.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from datetime import UTC, datetime
from itertools import count
from typing import ClassVar

from taskboard.core.board import BoardSnapshot, DeadRow, LinkHealth, WorkerRow
from taskboard.core.control import BoardControl, Scenario
from taskboard.tui import actions
from taskboard.tui.actions import ACTIONS, JobRef, Situation
from taskboard.tui.commands import TaskboardCommands
from taskboard.tui.demo_actions import DemoActions
from taskboard.tui.format import Colours, age, health_banner, waiting_line
from taskboard.tui.operator_actions import OperatorActions
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
from textual import events, work
from textual.actions import parse as parse_action
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.timer import Timer
from textual.widgets import DataTable

TICK_SECONDS = 1.0
"""Period of the health tick: the banner and waiting commands are redrawn at this pace."""

SAY_WAITING_AFTER = 1.0
"""Seconds a key's command may take before the screen says it is waiting."""


def _utc_now() -> datetime:
    return datetime.now(UTC)


class TaskboardApp(OperatorActions, DemoActions, App[None]):
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
        self._next_refresh: Timer | None = None
        self._demo_busy = False
        self._heap_frozen = False
        self._bindings_state: tuple[object, ...] = ()
        self._render_errors: set[str] = set()
        self._pending = {}
        self._pending_ids = count()

    # ------------------------------------------------------------------ layout

    # Panels are built in compose (DataTable needs the running app to measure columns);
    # the refresh path keeps direct references instead of querying the DOM every tick.
    # `_narration`, `_workers_table` and `_failures_log` are declared in `ActionHost`,
    # with the rest of what the action mixins use.
    _status: StatusLine
    _body: VerticalScroll
    _banner: ConnectionBanner
    _no_worker: NoWorkerLine
    _pending_line: PendingLine
    _claims_table: ClaimsTable
    _pool_panel: PoolHeadroom
    _effects_panel: EffectsPanel
    _queues_panel: QueuesPanel
    _trends_panel: TrendsPanel
    _dead_table: DeadJobsTable

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

    # ------------------------------------------------------------------ refresh loop

    @property
    def refreshing(self) -> bool:
        """True while a refresh is in flight (tests wait for it to turn False)."""
        return self._refreshing

    def request_refresh(self) -> None:
        """Refresh as soon as possible, e.g. right after a command.

        Never starts a second refresh beside one in flight: it asks that one to run again
        when it ends, so `control.refresh()` is never called concurrently.
        """
        if self._refreshing:
            self._refresh_again = True
            return
        if self._next_refresh is not None:
            self._next_refresh.stop()
            self._next_refresh = None
        self._refreshing = True
        self._refresh_worker()

    @work(exclusive=True, group="refresh", exit_on_error=False)
    async def _refresh_worker(self) -> None:
        try:
            try:
                snapshot = await self.control.refresh()
            except Exception as err:
                # The control promises a connected=False snapshot instead of raising; if
                # it raises anyway, show it as an outage rather than stop refreshing.
                snapshot = self._outage(f"{type(err).__name__}: {err}")
            self._render_safely(snapshot)
            if not self._heap_frozen and self.last_good is not None:
                self._heap_frozen = True
                self.call_after_refresh(_freeze_heap)
        finally:
            self._refreshing = False
            self._schedule_next()

    def _schedule_next(self) -> None:
        if self._refresh_again:
            self._refresh_again = False
            # Later, not now: starting the exclusive worker from inside the ending one
            # would cancel the worker that is still finishing.
            self.call_later(self.request_refresh)
        elif self._live and self.is_running:
            self._next_refresh = self.set_timer(self._refresh_seconds, self.request_refresh)

    def _outage(self, error: str) -> BoardSnapshot:
        base = self.last_good
        if base is None:
            return BoardSnapshot(
                db_now=self._clock(), database="", mode="", connected=False, error=error
            )
        return BoardSnapshot(
            db_now=base.db_now,
            database=base.database,
            mode=base.mode,
            connected=False,
            error=error,
        )

    def _render_safely(self, snapshot: BoardSnapshot) -> None:
        try:
            self._show_snapshot(snapshot)
        except Exception as err:
            # An operator's dashboard must not die on a row it cannot draw; say so once
            # per distinct problem and keep the refresh loop alive.
            message = f"{type(err).__name__}: {err}"
            self.log.error("render failed", error=message)
            if message not in self._render_errors:
                self._render_errors.add(message)
                self.notify(
                    message, title="Could not draw the board", severity="error", markup=False
                )

    def _show_snapshot(self, snapshot: BoardSnapshot) -> None:
        self.snapshot = snapshot
        colours = self._colours
        with self.batch_update():
            if snapshot.connected:
                # Panels only take connected snapshots: a failed refresh has no data, and
                # the operator needs the last known claims while the database is away.
                self.last_good = snapshot
                self._last_good_at = self._clock()
                self._workers_table.show(snapshot, colours)
                self._claims_table.show(snapshot, colours)
                self._failures_log.show(snapshot, colours)
                self._pool_panel.show(snapshot, colours)
                self._effects_panel.show(snapshot, colours)
                self._queues_panel.show(snapshot, colours)
                self._no_worker.show(snapshot, colours)
                self._trends_panel.show(snapshot.trends, colours)
                self._dead_table.show(snapshot, colours)
            if self.demo is not None:
                # The narration follows the board at any pace: what the step waits for,
                # or that it is ready for `n`.
                self.demo.observe(snapshot)
                self._render_narration()
            self.tick()

    # ------------------------------------------------------------------ health tick

    def tick(self) -> None:
        """Redraw what depends on time alone: the database's health (banner, header) and
        the commands still waiting on it. Runs every second while live, and after each
        refresh; reads `control.health()`, which does no I/O, so it never waits itself."""
        now = self._clock()
        snapshot = self.snapshot
        connected = snapshot is None or snapshot.connected
        health = self._health()
        data_age = (
            None if self._last_good_at is None else (now - self._last_good_at).total_seconds()
        )
        error = snapshot.error if snapshot is not None and not snapshot.connected else None
        text = health_banner(health, connected, data_age, error)
        self._banner.say(text)
        trouble: str | None = None
        if text is not None:
            silent = health.last_answer_age
            trouble = "DISCONNECTED" if silent is None else f"NO ANSWER {age(silent)}"
        self._status.show(snapshot, self.last_good, self._colours, trouble)
        self._body.set_class(text is not None, "-stale")
        self._pending_line.say(
            tuple(
                waiting_line(label, seconds)
                for label, started in self._pending.values()
                if (seconds := (now - started).total_seconds()) >= SAY_WAITING_AFTER
            )
        )
        self._update_bindings()

    def _health(self) -> LinkHealth:
        try:
            return self.control.health()
        except Exception as err:  # a control without health must not stop the tick
            return LinkHealth(last_error=f"{type(err).__name__}: {err}")

    @property
    def pending_commands(self) -> tuple[str, ...]:
        """What the commands sent by keys and not answered yet are doing ("retrying job #3")."""
        return tuple(label for label, _ in self._pending.values())

    @property
    def banner_text(self) -> str | None:
        """What the health banner says now (None while the database answers)."""
        return self._banner.text

    # ------------------------------------------------------------------ selection

    def _on_main_screen(self) -> bool:
        return len(self.screen_stack) <= 1

    def _main_focus(self) -> object:
        # The main screen's focus, also while the palette or a question is over it.
        return self.screen_stack[0].focused if self.screen_stack else None

    @property
    def selected_worker(self) -> WorkerRow | None:
        """The worker highlighted in the workers table while it has the focus (the target
        of p, x and d); None when another panel has the focus."""
        # getattr: bindings may be checked before compose has built the table.
        table: WorkersTable | None = getattr(self, "_workers_table", None)
        if table is None or self._main_focus() is not table:
            return None
        return table.selected

    @property
    def selected_dead_job(self) -> DeadRow | None:
        """The dead job highlighted in the dead jobs table while it has the focus (r)."""
        table: DeadJobsTable | None = getattr(self, "_dead_table", None)
        if table is None or self._main_focus() is not table:
            return None
        return table.selected

    @property
    def selected_job(self) -> JobRef | None:
        """The job under the cursor of the focused job table (claims, dead jobs, failures)."""
        focused = self._main_focus()
        claims: ClaimsTable | None = getattr(self, "_claims_table", None)
        if focused is None or claims is None:
            return None
        if focused is claims and (claim := claims.selected) is not None:
            return JobRef(claim.job_id, claim.kind, "claims", claim.worker_id)
        if focused is self._dead_table and (dead := self._dead_table.selected) is not None:
            return JobRef(dead.job_id, dead.kind, "dead")
        if focused is self._failures_log and (line := self._failures_log.selected) is not None:
            return JobRef(line.job_id, "", "failures", line.worker_id)
        return None

    def situation(self) -> Situation:
        """What the key checks need to know now."""
        return Situation(
            connected=self.snapshot is None or self.snapshot.connected,
            main_screen=self._on_main_screen(),
            worker=self.selected_worker,
            job=self.selected_job,
            demo=self.demo is not None,
            demo_busy=self._demo_busy,
            demo_finished=self.demo is not None and self.demo.finished,
            read_only=self.read_only,
        )

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        """A new selection may enable or disable keys (pause vs resume, crash on remote)."""
        self._update_bindings()

    def on_descendant_focus(self, _event: events.DescendantFocus) -> None:
        """Another panel has the focus: the row keys now act on its rows, or are greyed."""
        self._update_bindings()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a job row opens the job's detail."""
        if event.data_table in (self._claims_table, self._dead_table, self._failures_log):
            self.action_job_detail()

    # ------------------------------------------------------------------ availability

    def unavailable_reason(self, action: str, parameters: tuple[object, ...] = ()) -> str | None:
        """Why `action` cannot run now, in words for a notification; None if it can."""
        return actions.unavailable(action, self.situation())

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide what does not apply (demo keys outside demo mode, the other half of `p`,
        the main screen's keys on other screens); grey out what is impossible right now.
        A greyed key still explains itself when pressed (see `on_key`)."""
        known = actions.BY_NAME.get(action)
        if known is None:
            return True
        if not self._on_main_screen():
            return action == "quit"
        if known[0].demo_only and self.demo is None:
            return False
        worker = self.selected_worker
        if action == "resume_worker" and (worker is None or worker.state != "paused"):
            return False
        if action == "pause_worker" and worker is not None and worker.state == "paused":
            return False
        return None if self.unavailable_reason(action, parameters) else True

    def _update_bindings(self) -> None:
        # refresh_bindings() repaints the footer; do it only when availability changed,
        # not on every tick.
        state = tuple(self.check_action(*parse_action(a.action)[1:]) for a in ACTIONS)
        if state != self._bindings_state:
            self._bindings_state = state
            self.refresh_bindings()

    def on_key(self, event: events.Key) -> None:
        """Explain a greyed-out key instead of ignoring it silently."""
        if not self._on_main_screen():
            return
        active = self.screen.active_bindings.get(event.key)
        if active is None or active.enabled or active.node is not self:
            return
        _, name, parameters = parse_action(active.binding.action)
        reason = self.unavailable_reason(name, parameters)
        if reason:
            self.notify(reason, severity="warning", markup=False)

    def perform(self, action: str) -> None:
        """Run an action by name as a key would, or say why it cannot run (palette entry)."""
        _, name, parameters = parse_action(action)
        reason = self.unavailable_reason(name, parameters)
        if reason:
            self.notify(reason, severity="warning", markup=False)
            return
        self.call_later(self.run_action, action)

    # ------------------------------------------------------------------ palette

    def palette_entries(self) -> list[tuple[str, str, str]]:
        """(title, help, action) for the command palette, with why an entry is unavailable."""
        situation = self.situation()
        entries = []
        for action in ACTIONS:
            if action.name == "quit" or (action.demo_only and self.demo is None):
                continue  # the palette has its own Quit
            reason = action.unavailable(situation)
            help_text = f"unavailable: {reason}" if reason else action.tooltip
            entries.append((action.title, help_text, action.action))
        return entries

    # ------------------------------------------------------------------ lifecycle

    def on_unmount(self) -> None:
        """Stop the refresh timer; workers are cancelled by Textual."""
        if self._next_refresh is not None:
            self._next_refresh.stop()


def _freeze_heap() -> None:
    """Move everything alive after the first full frame out of the collector's reach.

    A full (generation 2) collection walks every tracked object: with the app's widgets,
    styles and libraries that was ~170,000 objects and 120-150 ms with the interpreter lock
    held, which stalled the embedded workers' thread too (renewal lateness spikes). What
    exists once the first board is on screen lives as long as the app, so the collector
    need not walk it again; later garbage is collected as usual.
    """
    gc.collect()
    gc.freeze()
