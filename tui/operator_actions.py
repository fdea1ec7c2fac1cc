"""`OperatorActions`: what the dashboard's operator keys do, mixed into `TaskboardApp`.

Pause, resume, drain, crash and add workers, hide stopped ones, retry and cancel jobs,
open a job's detail, the jobs list and the lease advice, pause a queue, help (the enqueue
keys are in `enqueue_actions.py`). What each key is (binding, title, why it is greyed out)
lives in `tui/actions.py`; this module holds what runs when it is pressed. Commands to the
control go through `_send`, off the key handler, so a database that does not answer never
freezes the screen (the app's waiting line says what each command waits for); the
irreversible ones (retry, crash, cancel) ask first through `_confirm`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from taskboard.tui.action_host import ActionHost
from taskboard.tui.actions import ACTIONS
from taskboard.tui.screens.advice import AdviceScreen
from taskboard.tui.screens.confirm import ConfirmScreen
from taskboard.tui.screens.health import HealthScreen
from taskboard.tui.screens.help import HelpScreen
from taskboard.tui.screens.job_detail import JobDetailScreen
from taskboard.tui.screens.jobs import JobsScreen
from taskboard.tui.screens.prompt import PromptScreen

T = TypeVar("T")

class OperatorActions(ActionHost):
    """The operator's keys: workers, sample jobs, dead and running jobs, queues, help."""

    # ------------------------------------------------------------------ commands

    def _send(
        self, what: str, command: Callable[[], Awaitable[T]], done: Callable[[T], str]
    ) -> None:
        """Run one control command off the key handler, so the UI never waits on it;
        `what` ("retrying job #3") is what the screen says while the database keeps it
        waiting."""
        self.run_worker(self._send_now(what, command, done), group="commands",
                        exit_on_error=False)

    async def _send_now(
        self, what: str, command: Callable[[], Awaitable[T]], done: Callable[[T], str]
    ) -> None:
        ticket = next(self._pending_ids)
        self._pending[ticket] = (what, self._clock())
        try:
            result = await command()
        except Exception as err:
            self.notify_failure(err, "Command failed")
        else:
            self.notify(done(result), markup=False)
        finally:
            del self._pending[ticket]
            self.tick()
            # Show the command's effect now rather than at the next tick.
            self.request_refresh()

    def _confirm(self, question: str, yes: str, then: Callable[[], None]) -> None:
        """Ask `question`; run `then` only on an explicit yes."""

        def answered(confirmed: bool | None) -> None:
            if confirmed:
                then()

        self.push_screen(ConfirmScreen(question, yes=yes), answered)

    def action_pause_worker(self) -> None:
        """Pause the selected worker."""
        worker = self.selected_worker
        if worker is not None:
            self._send(f"pausing {worker.id}", lambda: self.control.pause(worker.id),
                       lambda _: f"Pausing {worker.id}")

    def action_resume_worker(self) -> None:
        """Resume the selected worker."""
        worker = self.selected_worker
        if worker is not None:
            self._send(f"resuming {worker.id}", lambda: self.control.resume(worker.id),
                       lambda _: f"Resuming {worker.id}")

    def action_drain_worker(self) -> None:
        """Drain the selected worker."""
        worker = self.selected_worker
        if worker is not None:
            self._send(f"draining {worker.id}", lambda: self.control.drain(worker.id),
                       lambda _: f"Draining {worker.id}")

    def action_crash_worker(self) -> None:
        """Crash the selected worker of this dashboard, after asking; its leases are left
        to expire."""
        worker = self.selected_worker
        if worker is None:
            return
        jobs = f"its {worker.in_flight} job{'' if worker.in_flight == 1 else 's'}"
        self._confirm(
            f"Crash worker {worker.id}? It stops at once without releasing {jobs}: their "
            f"leases must expire (up to {worker.lease_seconds:g} s) before another worker "
            "can reclaim them, and a handler that was sending may have sent already.",
            f"Crash {worker.id}",
            lambda: self._send(
                f"crashing {worker.id}",
                lambda: self.control.crash(worker.id),
                lambda _: f"Crashed {worker.id}; its leases will expire",
            ),
        )

    def action_add_worker(self) -> None:
        """Start one more embedded worker."""
        self._send("adding a worker", self.control.add_worker,
                   lambda worker_id: f"Added worker {worker_id}")

    def action_toggle_stopped(self) -> None:
        """Show remote stopped and gone workers, or collapse them again."""
        table = self._workers_table
        table.hide_stopped = not table.hide_stopped
        if self.last_good is not None:
            table.show(self.last_good, self._colours)
        self.notify(
            "Remote stopped and gone workers hidden (h shows them)"
            if table.hide_stopped
            else "Remote stopped and gone workers shown",
            markup=False,
        )

    def action_retry_job(self) -> None:
        """Make the selected dead job pending again, after asking."""
        job = self.selected_job
        if job is None or job.table != "dead":
            return
        again = (
            "Its handler runs again and may charge the customer again."
            if job.kind == "billing"
            else "Its handler runs again, with everything it does outside the database."
        )
        self._confirm(
            f"Retry dead job #{job.job_id} ({job.kind})? {again}",
            f"Retry #{job.job_id}",
            lambda: self._send(
                f"retrying job #{job.job_id}",
                lambda: self.control.retry(job.job_id),
                lambda _: f"Retrying job #{job.job_id}",
            ),
        )

    def action_cancel_job(self) -> None:
        """Cancel the selected claimed job, after asking."""
        job = self.selected_job
        if job is None or job.table != "claims":
            return
        sent = (
            " A charge it already made is not taken back."
            if job.kind == "billing"
            else " What it already sent stays sent."
        )
        self._confirm(
            f"Cancel job #{job.job_id} ({job.kind}), held by {job.worker}? Its handler is "
            f"stopped within a second and the job will not run again unless retried.{sent}",
            f"Cancel #{job.job_id}",
            lambda: self._send(
                f"cancelling job #{job.job_id}",
                lambda: self.control.cancel_job(job.job_id),
                lambda _: f"Cancelled job #{job.job_id}",
            ),
        )

    def action_job_detail(self) -> None:
        """Open the selected job's detail."""
        job = self.selected_job
        if job is not None:
            self._open_job(job.job_id)

    def _open_job(self, job_id: int) -> None:
        self.push_screen(JobDetailScreen(self.control, job_id))

    def action_goto_job(self) -> None:
        """Ask for a job id and open its detail."""

        def opened(answer: str | None) -> None:
            if answer:
                self._open_job(int(answer.lstrip("#")))

        self.push_screen(
            PromptScreen("Open the detail of job #", placeholder="job id, e.g. 42",
                         check=_job_id_problem),
            opened,
        )

    def action_jobs(self) -> None:
        """Jobs by state, with a filter."""
        self.push_screen(JobsScreen(self.control, "pending"))

    def action_lease_advice(self) -> None:
        """Lease advice per kind."""
        self.push_screen(AdviceScreen(self.control))

    def action_queue_health(self) -> None:
        """The queue's health: vacuum, the oldest snapshot, claim time."""
        self.push_screen(HealthScreen(self.control))

    def action_queue(self) -> None:
        """Ask for a queue name; pause it, or resume it if it is paused."""
        paused = [q.name for q in self.last_good.paused_queues] if self.last_good else []
        now = f" Paused now: {', '.join(paused)}." if paused else " No queue is paused now."

        def answered(name: str | None) -> None:
            if not name:
                return
            if name in paused:
                self._send(f"resuming queue {name}", lambda: self.control.resume_queue(name),
                           lambda _: f"Queue {name} resumed")
            else:
                self._ask_pause_reason(name)

        self.push_screen(
            PromptScreen(
                "Queue to pause (a paused queue's name resumes it)." + now,
                value=paused[0] if paused else "default",
            ),
            answered,
        )

    def _ask_pause_reason(self, name: str) -> None:
        """The reason `status` and `queue list` show with the pause, as the CLI's
        `--reason` (empty: none); escape pauses nothing."""

        def answered(reason: str | None) -> None:
            if reason is None:
                return
            why = reason.strip() or None
            self._send(
                f"pausing queue {name}",
                lambda: self.control.pause_queue(name, why),
                lambda _: f"Queue {name} paused: no claims from it until resumed",
            )

        self.push_screen(
            PromptScreen(
                f"Why pause queue {name}? Shown by status and queue list (empty: no reason).",
                placeholder="e.g. Stripe outage, INC-1234",
                check=_reason_problem,
            ),
            answered,
        )

    def action_help(self) -> None:
        """Show the keys and the colour legend."""
        self.push_screen(HelpScreen(self._help_rows(), self._colours))

    def _help_rows(self) -> list[tuple[str, str, str]]:
        return [
            (self.get_key_display(action.binding()), action.title, action.tooltip)
            for action in ACTIONS
            if not (action.demo_only and self.demo is None)
        ]


def _job_id_problem(answer: str) -> str | None:
    digits = answer.lstrip("#")
    if not digits.isdigit() or len(digits) > 18:
        return "A job id is a whole number, e.g. 42."
    return None


MAX_REASON_CHARS = 500
"""As the CLI's `queue pause --reason`."""


def _reason_problem(answer: str) -> str | None:
    if len(answer) > MAX_REASON_CHARS:
        return f"A reason is at most {MAX_REASON_CHARS} characters."
    if not answer.isprintable():
        return "A reason is one line of printable text."
    return None
