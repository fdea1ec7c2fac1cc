"""`KeyAvailability`: what `TaskboardApp`'s keys act on and whether they can, mixed in.

Keys that act on a row act on the focused table's row only (the selection); what each key
is, its palette title and the reason it is unavailable come from `tui/actions.py`. A key
that does not apply is hidden, one that cannot run now is greyed, and a greyed key still
explains itself when pressed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taskboard.core.view.board import DeadRow, WorkerRow
from taskboard.tui import actions
from taskboard.tui.action_host import ActionHost
from taskboard.tui.actions import ACTIONS, JobRef, Situation
from taskboard.tui.widgets.claims import ClaimsTable
from taskboard.tui.widgets.dead_jobs import DeadJobsTable
from taskboard.tui.widgets.workers import WorkersTable
from textual import events
from textual.actions import parse as parse_action
from textual.widgets import DataTable


class KeyAvailability(ActionHost):
    """The selection, the keys' availability, greyed keys' explanations and the palette
    of `TaskboardApp` (which builds every attribute declared here)."""

    read_only: str | None
    _claims_table: ClaimsTable
    _dead_table: DeadJobsTable
    _bindings_state: tuple[object, ...]

    if TYPE_CHECKING:
        # Defined by `OperatorActions`.
        def action_job_detail(self) -> None: ...

    # ------------------------------------------------------------------ selection

    def _on_main_screen(self) -> bool:
        return len(self.screen_stack) <= 1

    def _main_focus(self) -> object:
        # The main screen's focus, also while the palette or a question is over it.
        return self.screen_stack[0].focused if self.screen_stack else None

    def _focused(self, name: str) -> WorkersTable | DeadJobsTable | None:
        # getattr: bindings may be checked before compose has built the tables.
        table: WorkersTable | DeadJobsTable | None = getattr(self, name, None)
        return table if table is not None and self._main_focus() is table else None

    @property
    def selected_worker(self) -> WorkerRow | None:
        """The worker highlighted in the workers table while it has the focus (the target
        of p, x and d); None when another panel has the focus."""
        table = self._focused("_workers_table")
        return table.selected if isinstance(table, WorkersTable) else None

    @property
    def selected_dead_job(self) -> DeadRow | None:
        """The dead job highlighted in the dead jobs table while it has the focus (r)."""
        table = self._focused("_dead_table")
        return table.selected if isinstance(table, DeadJobsTable) else None

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
