"""The help screen: every key with what it does, and the colour legend."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from taskboard.core.fleet import MAX_RESERVED_CONNECTIONS, MIN_RESERVED_CONNECTIONS
from taskboard.tui.format import (
    FAILURE_LABELS,
    HEALTHY_FRACTION,
    LOW_FRACTION,
    Colours,
    failure_style,
    lease_bar,
    worker_state_style,
)
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

_WORKER_STATES = (
    ("running", "claims, renews and completes"),
    ("paused", "stopped renewing and claiming; its leases run down"),
    ("draining", "finishing or releasing its jobs, then leaving"),
    ("stopped", "left the fleet"),
    ("gone", "heartbeat too old: crashed or cut off"),
)

FAILURES_LOG_OUTCOMES = ("renewal_failed", "lease_lost", "effect_refused", "completion_rejected")
"""What the failures log shows (core's LIST_TROUBLE): the lease's troubles. Failed, dead and
cancelled attempts are in the job's detail (and dead jobs in their own panel)."""

_FAILURE_MEANINGS = {
    "renewal_failed": "a renewal found the token changed or the lease expired",
    "lease_lost": "the worker treats the job as no longer its own",
    "effect_refused": "lease lost or local deadline passed: an email or charge not started",
    "completion_rejected": "the fenced UPDATE changed zero rows: stale token",
    "failed": "the handler raised; the job retries with backoff",
    "dead": "attempts exhausted or a permanent error",
    "cancelled": "an operator cancelled the job; its handler was stopped",
}


class HelpScreen(ModalScreen[None]):
    """Keys (from the app's bindings, so the list cannot drift) and the colour legend."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "dismiss", "Close", id="help-close"),
    ]

    def __init__(self, keys: list[tuple[str, str, str]], colours: Colours) -> None:
        super().__init__()
        self.keys = keys
        """(key, title, explanation) rows, in the app's binding order."""
        self._colours = colours

    def compose(self) -> ComposeResult:
        """Keys table, then the legend, in a scrollable frame."""
        with VerticalScroll(id="help-frame") as frame:
            frame.border_title = "Taskboard help"
            frame.border_subtitle = "escape closes"
            yield Static(self._keys_table(), id="help-keys")
            yield Static(self._legend(), id="help-legend")

    def _keys_table(self) -> Table:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(no_wrap=True)
        table.add_column(style=self._colours.muted)
        table.add_row(Text("Keys", "bold underline"), "", "")
        for key, title, tooltip in self.keys:
            table.add_row(key, title, tooltip)
        table.add_row("ctrl+p", "Command palette", "Every action above, searchable.")
        table.add_row(
            "↑ ↓ tab", "Move", "Move in a table; tab to the next panel. Keys act on the "
            "row of the panel that has the focus."
        )
        return table

    def _legend(self) -> Table:
        colours = self._colours
        table = Table.grid(padding=(0, 2))
        table.add_column(no_wrap=True)
        table.add_column()
        table.add_row(Text("\nLease countdown (time left on the DB clock)", "bold underline"), "")
        lease = 60.0
        for fraction, meaning in (
            (0.8, f"more than {HEALTHY_FRACTION:.0%} of the lease left"),
            (0.35, f"{LOW_FRACTION:.0%} to {HEALTHY_FRACTION:.0%} left: renewal is due"),
            (0.1, f"{LOW_FRACTION:.0%} or less left: about to expire"),
            (0.0, "deadline passed: any worker may reclaim the job"),
        ):
            table.add_row(lease_bar(fraction, fraction * lease, colours), meaning)
        table.add_row(Text("\nWorker states", "bold underline"), "")
        for state, meaning in _WORKER_STATES:
            table.add_row(Text(state, worker_state_style(state, colours)), meaning)
        table.add_row(Text("\nFailures log", "bold underline"), "")
        for outcome in FAILURES_LOG_OUTCOMES:
            table.add_row(Text(FAILURE_LABELS[outcome], failure_style(outcome, colours)),
                          _FAILURE_MEANINGS[outcome])
        table.add_row(Text("\nAttempts in a job's detail, also", "bold underline"), "")
        for outcome, label in FAILURE_LABELS.items():
            if outcome not in FAILURES_LOG_OUTCOMES:
                table.add_row(Text(label, failure_style(outcome, colours)),
                              _FAILURE_MEANINGS[outcome])
        table.add_row(Text("\nPool headroom", "bold underline"), "")
        table.add_row(
            "6/10 used",
            f"connections taken from the pool, the {MIN_RESERVED_CONNECTIONS} or "
            f"{MAX_RESERVED_CONNECTIONS} reserved for the engine (claims, renewals, grouped "
            "completions) and control included",
        )
        table.add_row(Text("4 free", colours.good), "connections a job that writes may take")
        table.add_row(
            Text("2 free", f"bold {colours.warn}"),
            "jobs are waiting for a connection (renewals are not: they use the reserved one)",
        )
        table.add_row(
            Text("0 free: FULL", f"bold reverse {colours.bad}"),
            "every connection taken and jobs waiting: raise --pool-size or run fewer writers",
        )
        table.add_row(Text("\nExternal effects", "bold underline"), "")
        table.add_row(
            Text("DUPLICATE", f"bold {colours.warn}"),
            "same Message-ID received twice: the fence cannot retract a send",
        )
        table.add_row(
            Text("replayed", colours.good),
            "Stripe answered a repeated Idempotency-Key with the first charge",
        )
        return table
