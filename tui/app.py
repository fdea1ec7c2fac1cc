"""`TaskboardApp`: live panels over `BoardSnapshot`s, commands through a `BoardControl`.

The embedded workers share this process and event loop, so the dashboard's own work has
to stay small: one refresh at a time (the next one is scheduled only after the previous
one rendered, so a slow database stretches the period instead of stacking refreshes),
tables diffed by key, static panels repainted only when their data changed.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import ClassVar, TypeVar

from taskboard.core.board import BoardSnapshot, DeadRow, WorkerRow
from taskboard.core.control import BoardControl, CommandRefused, Scenario
from taskboard.tui.commands import TaskboardCommands
from taskboard.tui.format import Colours
from taskboard.tui.screens.help import HelpScreen
from taskboard.tui.widgets.banner import ConnectionBanner
from taskboard.tui.widgets.claims import ClaimsTable
from taskboard.tui.widgets.dead_jobs import DeadJobsTable
from taskboard.tui.widgets.effects import EffectsPanel
from taskboard.tui.widgets.failures import FailuresLog
from taskboard.tui.widgets.narration import Narration
from taskboard.tui.widgets.pool import PoolHeadroom
from taskboard.tui.widgets.status_line import StatusLine
from taskboard.tui.widgets.workers import WorkersTable
from textual import events, work
from textual.actions import parse as parse_action
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.timer import Timer
from textual.widgets import DataTable, Footer

T = TypeVar("T")

SAMPLE_KINDS = ("email", "billing", "sleep")
"""Kinds the enqueue keys offer; `BoardControl.enqueue_sample` knows how to fill them."""

_INACTIVE_WORKER_STATES = frozenset({"stopped", "gone"})

_ENQUEUE = Binding.Group("Enqueue", compact=True)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class TaskboardApp(App[None]):
    """The Taskboard dashboard.

    Args:
        control: the engine side: snapshots come from `control.refresh()`, every key
            press becomes one of its commands.
        clock: wall clock, used only for "data from N s ago" while the database is down
            (every lease countdown uses `snapshot.db_now`). Injected so snapshot tests
            can freeze it; defaults to UTC now.
        refresh_seconds: pause between the end of one refresh and the start of the next.
        live: False for snapshot tests and screenshots: one refresh on mount, no timer.
        mode_label: shown in the header; empty means the snapshot's own `mode`.
        demo: a training scenario; shows the narration panel and enables `n`.
    """

    CSS_PATH = "taskboard.tcss"
    TITLE = "Taskboard"
    COMMANDS = App.COMMANDS | {TaskboardCommands}
    # Below 100 columns the side panels move under the main ones and the screen scrolls.
    HORIZONTAL_BREAKPOINTS = [
        (0, "-narrow"),
        (100, "-wide"),
    ]

    BINDINGS: ClassVar[list[BindingType]] = [
        # Two bindings share `p` so the footer names what it will do; check_action hides
        # the one that does not apply to the selected worker.
        Binding(
            "p",
            "pause_worker",
            "Pause worker",
            tooltip="Pause the selected worker: it stops renewing and claiming, so its "
            "leases run down and other workers may reclaim its jobs.",
            id="pause-worker",
        ),
        Binding(
            "p",
            "resume_worker",
            "Resume worker",
            tooltip="Resume the selected paused worker. Completions of jobs it lost are "
            "rejected by the fence.",
            id="resume-worker",
        ),
        Binding(
            "a",
            "add_worker",
            "Add worker",
            tooltip="Start one more worker in this process.",
            id="add-worker",
        ),
        Binding(
            "x",
            "crash_worker",
            "Crash",
            tooltip="Stop the selected embedded worker at once without releasing its "
            "leases: they must expire before anyone reclaims the jobs.",
            id="crash-worker",
        ),
        Binding(
            "d",
            "drain_worker",
            "Drain",
            tooltip="Ask the selected worker to stop claiming, finish or release its jobs, "
            "and leave.",
            id="drain-worker",
        ),
        # One footer entry ("ebs Enqueue") for the three sample kinds keeps `?` and `q`
        # on screen at 80 columns.
        Binding(
            "e",
            "enqueue('email')",
            "Email",
            tooltip="Enqueue a sample email job (e).",
            id="enqueue-email",
            group=_ENQUEUE,
        ),
        Binding(
            "b",
            "enqueue('billing')",
            "Billing",
            tooltip="Enqueue a sample billing job (b).",
            id="enqueue-billing",
            group=_ENQUEUE,
        ),
        Binding(
            "s",
            "enqueue('sleep')",
            "Sleep",
            tooltip="Enqueue a sample sleep job (s).",
            id="enqueue-sleep",
            group=_ENQUEUE,
        ),
        Binding(
            "r",
            "retry_dead",
            "Retry",
            tooltip="Make the selected dead job pending again.",
            id="retry-dead",
        ),
        Binding(
            "n",
            "next_step",
            "Next step",
            tooltip="Run the next step of the training scenario.",
            id="demo-next",
        ),
        Binding("question_mark", "help", "Help", tooltip="Keys and colour legend.", id="help"),
        Binding("q", "quit", "Quit", tooltip="Quit the dashboard.", id="quit"),
    ]

    ACTION_TITLES: ClassVar[dict[str, str]] = {
        "pause_worker": "Pause worker",
        "resume_worker": "Resume worker",
        "add_worker": "Add worker",
        "crash_worker": "Crash worker",
        "drain_worker": "Drain worker",
        "enqueue('email')": "Enqueue email job",
        "enqueue('billing')": "Enqueue billing job",
        "enqueue('sleep')": "Enqueue sleep job",
        "retry_dead": "Retry dead job",
        "next_step": "Next demo step",
        "help": "Help: keys and colour legend",
    }
    """Command palette entries for the actions above (the palette adds its own Quit)."""

    def __init__(
        self,
        control: BoardControl,
        *,
        clock: Callable[[], datetime] | None = None,
        refresh_seconds: float = 1.0,
        live: bool = True,
        mode_label: str = "",
        demo: Scenario | None = None,
    ) -> None:
        super().__init__()
        if refresh_seconds <= 0:
            raise ValueError("refresh_seconds must be positive")
        self.control = control
        """The engine interface every command goes through."""
        self.demo = demo
        """The training scenario, or None outside demo mode."""
        self._clock = clock or _utc_now
        self._refresh_seconds = refresh_seconds
        self._live = live
        self._mode_label = mode_label
        self._colours = Colours()
        self.snapshot: BoardSnapshot | None = None
        """The latest snapshot received, connected or not."""
        self.last_good: BoardSnapshot | None = None
        """The latest snapshot with `connected=True`: what the panels show."""
        self._last_good_at: datetime | None = None
        self._refreshing = False
        self._refresh_again = False
        self._next_refresh: Timer | None = None
        self._demo_busy = False
        self._heap_frozen = False
        self._bindings_state: tuple[object, ...] = ()
        self._render_errors: set[str] = set()

    # ------------------------------------------------------------------ layout

    # Panels are built in compose (DataTable needs the running app to measure columns);
    # the refresh path keeps direct references instead of querying the DOM every tick.
    _status: StatusLine
    _body: VerticalScroll
    _banner: ConnectionBanner
    _narration: Narration | None
    _workers_table: WorkersTable
    _claims_table: ClaimsTable
    _failures_log: FailuresLog
    _pool_panel: PoolHeadroom
    _effects_panel: EffectsPanel
    _dead_table: DeadJobsTable

    def compose(self) -> ComposeResult:
        """Header line, banner, narration (demo), the fleet, claims beside pools, effects
        and dead jobs, the failures log across the bottom, footer."""
        self._status = StatusLine(
            mode_label=self._mode_label, refresh_seconds=self._refresh_seconds, id="status"
        )
        self._banner = ConnectionBanner(id="banner")
        self._narration = Narration(id="narration") if self.demo is not None else None
        self._workers_table = WorkersTable(id="workers")
        self._claims_table = ClaimsTable(id="claims")
        self._failures_log = FailuresLog(id="failures")
        self._pool_panel = PoolHeadroom(id="pool")
        self._effects_panel = EffectsPanel(id="effects")
        self._dead_table = DeadJobsTable(id="dead")
        yield self._status
        yield self._banner
        if self._narration is not None:
            yield self._narration
        with VerticalScroll(id="body") as self._body:
            yield self._workers_table
            with Horizontal(id="middle"):
                yield self._claims_table
                with Vertical(id="side"):
                    yield self._pool_panel
                    yield self._effects_panel
                    yield self._dead_table
            yield self._failures_log
        yield Footer(compact=True)

    def on_mount(self) -> None:
        """Resolve theme colours, focus the fleet, and start the refresh loop."""
        self._colours = Colours.from_theme(self.get_css_variables())
        self.theme_changed_signal.subscribe(self, self._on_theme_changed)
        self._workers_table.focus()
        self._status.show(None, None, self._colours)
        self._render_narration()
        self.request_refresh()

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
        now = self._clock()
        self.snapshot = snapshot
        colours = self._colours
        with self.batch_update():
            if snapshot.connected:
                # Panels only take connected snapshots: a failed refresh has no data, and
                # the operator needs the last known claims while the database is away.
                self.last_good = snapshot
                self._last_good_at = now
                self._workers_table.show(snapshot, colours)
                self._claims_table.show(snapshot, colours)
                self._failures_log.show(snapshot, colours)
                self._pool_panel.show(snapshot, colours)
                self._effects_panel.show(snapshot, colours)
                self._dead_table.show(snapshot, colours)
            self._status.show(snapshot, self.last_good, colours)
            self._banner.show(snapshot, self._last_good_at, now)
            self._body.set_class(not snapshot.connected, "-stale")
        self._update_bindings()

    # ------------------------------------------------------------------ selection

    @property
    def selected_worker(self) -> WorkerRow | None:
        """The worker highlighted in the workers table (target of p, x, d)."""
        # getattr: bindings may be checked before compose has built the table.
        table: WorkersTable | None = getattr(self, "_workers_table", None)
        return table.selected if table is not None else None

    @property
    def selected_dead_job(self) -> DeadRow | None:
        """The dead job highlighted in the dead jobs table (target of r)."""
        table: DeadJobsTable | None = getattr(self, "_dead_table", None)
        return table.selected if table is not None else None

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        """A new selection may enable or disable keys (pause vs resume, crash on remote)."""
        self._update_bindings()

    # ------------------------------------------------------------------ availability

    def unavailable_reason(self, action: str, parameters: tuple[object, ...] = ()) -> str | None:
        """Why `action` cannot run now, in words for a notification; None if it can."""
        worker = self.selected_worker
        connected = self.snapshot is None or self.snapshot.connected
        if action in ("pause_worker", "resume_worker", "drain_worker", "crash_worker"):
            if worker is None:
                return "No worker selected: highlight one in the workers table first."
            if action == "pause_worker" and worker.state != "running":
                return f"Worker {worker.id} is {worker.state}; only a running worker can pause."
            if action == "resume_worker" and worker.state != "paused":
                return f"Worker {worker.id} is {worker.state}, not paused: nothing to resume."
            if action == "drain_worker" and worker.state in _INACTIVE_WORKER_STATES | {"draining"}:
                return f"Worker {worker.id} is already {worker.state}."
            if action == "crash_worker":
                if not worker.embedded:
                    return (
                        f"Worker {worker.id} runs on {worker.host}, not in this process; "
                        "only embedded workers can be crashed from here."
                    )
                if worker.state in _INACTIVE_WORKER_STATES:
                    return f"Worker {worker.id} is already {worker.state}."
        elif action == "enqueue":
            if not connected:
                return "The database is unreachable; enqueue once it is back."
        elif action == "retry_dead":
            if not connected:
                return "The database is unreachable; retry once it is back."
            if self.selected_dead_job is None:
                return "No dead job selected: highlight one in the dead jobs table first."
        elif action == "next_step":
            if self.demo is None:
                return "The training scenario runs only in demo mode."
            if self._demo_busy:
                return "The current step is still running."
            if self.demo.finished:
                return "The training scenario is over."
        return None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide what does not apply (demo key outside demo mode, the other half of `p`);
        grey out what is impossible right now. A greyed key still explains itself when
        pressed (see `on_key`)."""
        if action == "next_step" and self.demo is None:
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
        state = tuple(self.check_action(*parse_action(action)[1:]) for action in self.ACTION_TITLES)
        if state != self._bindings_state:
            self._bindings_state = state
            self.refresh_bindings()

    def on_key(self, event: events.Key) -> None:
        """Explain a greyed-out key instead of ignoring it silently."""
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

    # ------------------------------------------------------------------ commands

    def _send(self, command: Callable[[], Awaitable[T]], done: Callable[[T], str]) -> None:
        """Run one control command off the key handler, so the UI never waits on it."""
        self.run_worker(self._send_now(command, done), group="commands", exit_on_error=False)

    async def _send_now(
        self, command: Callable[[], Awaitable[T]], done: Callable[[T], str]
    ) -> None:
        try:
            result = await command()
        except CommandRefused as err:
            self.notify(str(err), severity="warning", markup=False)
        except Exception as err:
            self.notify(
                f"{type(err).__name__}: {err}",
                title="Command failed",
                severity="error",
                markup=False,
            )
        else:
            self.notify(done(result), markup=False)
        finally:
            # Show the command's effect now rather than at the next tick.
            self.request_refresh()

    def action_pause_worker(self) -> None:
        """Pause the selected worker."""
        worker = self.selected_worker
        if worker is not None:
            self._send(lambda: self.control.pause(worker.id), lambda _: f"Pausing {worker.id}")

    def action_resume_worker(self) -> None:
        """Resume the selected worker."""
        worker = self.selected_worker
        if worker is not None:
            self._send(lambda: self.control.resume(worker.id), lambda _: f"Resuming {worker.id}")

    def action_drain_worker(self) -> None:
        """Drain the selected worker."""
        worker = self.selected_worker
        if worker is not None:
            self._send(lambda: self.control.drain(worker.id), lambda _: f"Draining {worker.id}")

    def action_crash_worker(self) -> None:
        """Crash the selected embedded worker; its leases are left to expire."""
        worker = self.selected_worker
        if worker is not None:
            self._send(
                lambda: self.control.crash(worker.id),
                lambda _: f"Crashed {worker.id}; its leases will expire",
            )

    def action_add_worker(self) -> None:
        """Start one more embedded worker."""
        self._send(self.control.add_worker, lambda worker_id: f"Added worker {worker_id}")

    def action_enqueue(self, kind: str) -> None:
        """Enqueue one sample job of `kind`."""
        if kind not in SAMPLE_KINDS:
            self.notify(f"No sample job of kind {kind!r}.", severity="warning", markup=False)
            return
        self._send(
            lambda: self.control.enqueue_sample(kind),
            lambda job_id: f"Enqueued {kind} job #{job_id}",
        )

    def action_retry_dead(self) -> None:
        """Make the selected dead job pending again."""
        job = self.selected_dead_job
        if job is not None:
            self._send(
                lambda: self.control.retry(job.job_id), lambda _: f"Retrying job #{job.job_id}"
            )

    def action_help(self) -> None:
        """Show the keys and the colour legend."""
        self.push_screen(HelpScreen(self._help_rows(), self._colours))

    def _help_rows(self) -> list[tuple[str, str, str]]:
        rows: list[tuple[str, str, str]] = []
        for binding in self.BINDINGS:
            assert isinstance(binding, Binding)
            if binding.action == "next_step" and self.demo is None:
                continue
            title = self.ACTION_TITLES.get(binding.action, binding.description)
            rows.append((self.get_key_display(binding), title, binding.tooltip))
        return rows

    # ------------------------------------------------------------------ demo

    def action_next_step(self) -> None:
        """Advance the training scenario by one step."""
        if self.demo is not None and not self._demo_busy:
            self._demo_busy = True
            self._render_narration()
            self._update_bindings()
            self.run_worker(self.advance_demo(), group="demo", exit_on_error=False)

    async def advance_demo(self) -> None:
        """Run the next demo step against the latest snapshot, then refresh the board."""
        if self.demo is None:
            return
        try:
            await self.demo.advance(self.control, self.snapshot)
        except CommandRefused as err:
            self.notify(str(err), severity="warning", markup=False)
        except Exception as err:
            self.notify(
                f"{type(err).__name__}: {err}",
                title="Demo step failed",
                severity="error",
                markup=False,
            )
        finally:
            self._demo_busy = False
            self._render_narration()
            self._update_bindings()
            self.request_refresh()

    def _render_narration(self) -> None:
        if self._narration is not None and self.demo is not None:
            self._narration.show(self.demo.progress(), self._colours, busy=self._demo_busy)

    # ------------------------------------------------------------------ palette

    def palette_entries(self) -> list[tuple[str, str, str]]:
        """(title, help, action) for the command palette, with why an entry is unavailable."""
        entries = []
        for action, title in self.ACTION_TITLES.items():
            _, name, parameters = parse_action(action)
            if name == "next_step" and self.demo is None:
                continue
            reason = self.unavailable_reason(name, parameters)
            help_text = f"unavailable: {reason}" if reason else self._binding_tooltip(action)
            entries.append((title, help_text, action))
        return entries

    def _binding_tooltip(self, action: str) -> str:
        for binding in self.BINDINGS:
            if isinstance(binding, Binding) and binding.action == action:
                return binding.tooltip
        return ""

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
