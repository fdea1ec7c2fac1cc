"""`RefreshLoop`: how `TaskboardApp` keeps its panels current, mixed into the app.

One refresh at a time: the next one is scheduled only after the previous one rendered, so
a slow database stretches the period instead of stacking refreshes; panels take connected
snapshots only, so the last known claims stay on screen while the database is away. Beside
it, a one-second tick reads `control.health()` (no I/O) and says, while a refresh or a
command is still waiting on a database that does not answer, how long it has been silent
and how old the data on screen is.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

from taskboard.core.view.board import BoardSnapshot, LinkHealth
from taskboard.tui.action_host import ActionHost
from taskboard.tui.format import age, health_banner, waiting_line
from taskboard.tui.widgets.banner import ConnectionBanner, NoWorkerLine, PendingLine
from taskboard.tui.widgets.claims import ClaimsTable
from taskboard.tui.widgets.dead_jobs import DeadJobsTable
from taskboard.tui.widgets.effects import EffectsPanel
from taskboard.tui.widgets.pool import PoolHeadroom
from taskboard.tui.widgets.queues import QueuesPanel
from taskboard.tui.widgets.status_line import StatusLine
from taskboard.tui.widgets.trends import TrendsPanel
from textual import work
from textual.containers import VerticalScroll
from textual.timer import Timer

if TYPE_CHECKING:
    from datetime import datetime

TICK_SECONDS = 1.0
"""Period of the health tick: the banner and waiting commands are redrawn at this pace."""

SAY_WAITING_AFTER = 1.0
"""Seconds a key's command may take before the screen says it is waiting."""


class RefreshLoop(ActionHost):
    """The refresh loop and the health tick of `TaskboardApp` (which builds every
    attribute declared here, in `__init__` or `compose`)."""

    # Panels are built in the app's compose (DataTable needs the running app to measure
    # columns); the refresh path keeps direct references instead of querying the DOM
    # every tick.
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
    _live: bool
    _refresh_seconds: float
    _refreshing: bool
    _refresh_again: bool
    _next_refresh: Timer | None
    _heap_frozen: bool
    _render_errors: set[str]
    _last_good_at: datetime | None

    if TYPE_CHECKING:
        # Defined by `DemoActions`.
        def _render_narration(self) -> None: ...

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
