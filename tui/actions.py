"""Every key of the dashboard in one record: its binding, its palette title, its help line
and the reason it cannot run right now.

Before this module the bindings, the palette titles and the "why is this key greyed out"
checks were three lists in the app that had to stay in step; now each `Action` carries all
of it, and the app, the footer, the help screen and the command palette read `ACTIONS`.
What a key does when it runs is its `action_*` method, in `operator_actions.py` or, for the
training scenario, `demo_actions.py`.

Keys that act on a row act on the row under the cursor of the *focused* table only: a dead
job highlighted in a panel the operator is not looking at must never be retried because a
worker row had the focus (issue 13, defect 8).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from taskboard.core.view.board import WorkerRow
from textual.actions import parse as parse_action
from textual.binding import Binding

ALWAYS = 0
"""Footer level: shown at every width (the footer must fit 80 columns in demo mode)."""

WIDE = 120
"""Footer level: shown from 120 columns."""

FULL = 160
"""Footer level: shown from 160 columns."""

HUGE = 200
"""Footer level: shown from 200 columns."""

NEVER = 10_000
"""Footer level: only in the help screen and the command palette."""

INACTIVE_WORKER_STATES = frozenset({"stopped", "gone"})
"""Workers that no longer run: keys that act on a worker are greyed on them, and remote
ones are collapsed until `h` shows them."""

JobTable = Literal["claims", "dead", "failures"]


@dataclass(frozen=True)
class JobRef:
    """The job under the cursor of the focused job table."""

    job_id: int
    kind: str
    table: JobTable
    worker: str = ""  # the holder (claims) or the worker of the failure line


@dataclass(frozen=True)
class Situation:
    """What the checks need to know about the app at the moment a key is pressed."""

    connected: bool = True
    main_screen: bool = True
    worker: WorkerRow | None = None  # only when the workers table has the focus
    job: JobRef | None = None  # only when a job table has the focus
    demo: bool = False
    demo_busy: bool = False
    demo_finished: bool = False
    read_only: str | None = None  # why nothing may be changed from this tab (None: it may)


Check = Callable[[Situation], str | None]

READS = frozenset({"toggle_stopped", "job_detail", "goto_job", "jobs", "lease_advice", "help",
                   "quit"})
"""Keys that change nothing: the only ones a read-only tab has."""


@dataclass(frozen=True)
class Action:
    """One key: binding, palette title, help text, footer level and availability check."""

    key: str
    action: str  # Textual action string, e.g. "enqueue('email')"
    label: str  # the footer's word(s)
    title: str  # palette entry and help line
    tooltip: str  # what it does, in a sentence
    check: Check | None = None  # why it cannot run now (None: it can)
    footer: int = ALWAYS
    demo_only: bool = False
    group: Binding.Group | None = None
    key_display: str | None = None

    @property
    def name(self) -> str:
        """The action's method name without parameters, e.g. `enqueue`."""
        return parse_action(self.action)[1]

    @property
    def binding_id(self) -> str:
        """A stable id for keymaps and the footer's classes."""
        return self.action.replace("(", "-").replace(")", "").replace("'", "").replace("_", "-")

    def binding(self) -> Binding:
        """The Textual binding for this action."""
        return Binding(
            self.key,
            self.action,
            self.label,
            show=self.footer < NEVER,
            key_display=self.key_display,
            tooltip=self.tooltip,
            id=self.binding_id,
            group=self.group,
        )

    def unavailable(self, situation: Situation) -> str | None:
        """Why this action cannot run now, in words for a notification; None if it can."""
        if self.demo_only and not situation.demo:
            return "The training scenario runs only in demo mode (taskboard-tui --demo)."
        if situation.read_only and self.name not in READS:
            return situation.read_only
        return self.check(situation) if self.check is not None else None


# --- checks ------------------------------------------------------------------------------

_NO_WORKER = "No worker selected: move to the workers table (tab) and highlight one."


def _database(s: Situation) -> str | None:
    if not s.connected:
        return "The database does not answer; try again once it is back."
    return None


def _pause(s: Situation) -> str | None:
    # Greyed with the reason: a pause or drain sent to a worker that no longer runs would
    # be written to its row and heard by no one.
    if s.worker is None:
        return _NO_WORKER
    return _gone(s.worker)


def _gone(worker: WorkerRow) -> str | None:
    if worker.state == "gone":
        return (
            f"Worker {worker.id} is gone (no heartbeat for too long: crashed or cut off); "
            "nothing hears a command. Its leases expire and other workers reclaim its jobs."
        )
    if worker.state == "stopped":
        return f"Worker {worker.id} has stopped; nothing to pause, drain or crash."
    return None


def _resume(s: Situation) -> str | None:
    if s.worker is None:
        return _NO_WORKER
    if s.worker.state != "paused":
        return f"Worker {s.worker.id} is {s.worker.state}, not paused: nothing to resume."
    return None


def _crash(s: Situation) -> str | None:
    if s.worker is None:
        return _NO_WORKER
    if not s.worker.embedded:
        return (
            f"Worker {s.worker.id} runs on {s.worker.host}, not in this dashboard; only "
            "the workers it started can be crashed from here."
        )
    return _gone(s.worker)


def _job(s: Situation) -> str | None:
    if s.job is None:
        return "No job selected: move to the claims, dead jobs or failures table (tab)."
    return None


def _retry(s: Situation) -> str | None:
    if s.job is None or s.job.table != "dead":
        return "No dead job selected: move to the dead jobs table (tab) and highlight one."
    return _database(s)


def _cancel(s: Situation) -> str | None:
    if s.job is None or s.job.table != "claims":
        return "No running job selected: move to the claims table (tab) and highlight one."
    return _database(s)


def _next_step(s: Situation) -> str | None:
    if s.demo_busy:
        return "The current step is still running."
    if s.demo_finished:
        return "The training scenario is over; R starts it again."
    return None


def _restart(s: Situation) -> str | None:
    if s.demo_busy:
        return "The current step is still running."
    return _database(s)


_ENQUEUE = Binding.Group("Enqueue", compact=True)

ACTIONS: tuple[Action, ...] = (
    # Two actions share `p` so the footer names what it will do; the app hides the one
    # that does not apply to the selected worker.
    Action("p", "pause_worker", "Pause worker", "Pause worker",
           "Pause the selected worker: it stops renewing and claiming, so its leases run "
           "down and other workers may reclaim its jobs.", _pause),
    Action("p", "resume_worker", "Resume worker", "Resume worker",
           "Resume the selected paused worker. Completions of jobs it lost are rejected "
           "by the fence.", _resume),
    Action("x", "crash_worker", "Crash", "Crash worker",
           "Stop the selected worker of this dashboard at once without releasing its "
           "leases: they must expire before anyone reclaims the jobs. Asks first.", _crash),
    Action("d", "drain_worker", "Drain", "Drain worker",
           "Ask the selected worker to stop claiming, finish or release its jobs, and "
           "leave.", _pause, footer=WIDE),
    Action("a", "add_worker", "Add worker", "Add worker",
           "Start one more worker in this dashboard.", footer=WIDE),
    Action("h", "toggle_stopped", "Stopped", "Show or hide stopped remote workers",
           "Show remote workers that stopped or are gone (their heartbeat is too old; "
           "earlier runs' workers pile up), or collapse them again as at the start.",
           footer=FULL),
    # One footer entry ("ebs Enqueue") for the three sample kinds.
    Action("e", "enqueue('email')", "Email", "Enqueue email job",
           "Enqueue a sample email job.", _database, group=_ENQUEUE),
    Action("b", "enqueue('billing')", "Billing", "Enqueue billing job",
           "Enqueue a sample billing job.", _database, group=_ENQUEUE),
    Action("s", "enqueue('sleep')", "Sleep", "Enqueue sleep job",
           "Enqueue a sample sleep job.", _database, group=_ENQUEUE),
    Action("E", "enqueue_kind", "Enqueue kind", "Enqueue a job of any kind",
           "Pick a kind (with --app, the app's own kinds first) and type its payload as "
           "JSON; the kind's validation checks it before it is sent.", _database,
           footer=FULL),
    Action("r", "retry_job", "Retry", "Retry dead job",
           "Make the selected dead job pending again (a billing job may charge again). "
           "Asks first.", _retry),
    Action("C", "cancel_job", "Cancel", "Cancel running job",
           "Cancel the selected claimed job; the worker running it stops within a "
           "second. Asks first.", _cancel),
    Action("enter", "job_detail", "Detail", "Job detail",
           "Everything about the selected job: payload, every attempt with its error, "
           "its emails and charges.", _job, footer=NEVER, key_display="⏎"),
    Action("g", "goto_job", "Go to job", "Job detail by id",
           "Type a job id and open its detail.", footer=NEVER),
    Action("j", "jobs", "Jobs", "Jobs by state",
           "Pending, scheduled, running, completed, dead and cancelled jobs, with a "
           "filter and sortable columns.", footer=FULL),
    Action("L", "lease_advice", "Lease advice", "Lease advice",
           "Per kind: its lease, timeout, attempts and fleet limits, beside what "
           "taskboard advise says of its lease and what sets it.", footer=HUGE),
    Action("H", "queue_health", "Health", "Queue health",
           "Can PostgreSQL clean up after the queue: dead rows, the session holding the "
           "oldest snapshot, slots, claim time; amber or red with what to do.",
           footer=HUGE),
    Action("P", "queue", "Pause queue", "Pause or resume a queue",
           "Type a queue name: a running queue is paused (no claims from it, in-flight "
           "jobs finish) with the reason you give, a paused one resumes.", _database, footer=HUGE),
    Action("n", "next_step", "Next step", "Next demo step",
           "Run the next step of the training scenario.", _next_step, demo_only=True),
    Action("R", "restart_demo", "Restart", "Restart the demo",
           "Empty the demo database and start the training scenario again. Asks first.",
           _restart, footer=FULL, demo_only=True),
    Action("question_mark", "help", "Help", "Help: keys and colour legend",
           "Keys and colour legend."),
    Action("q", "quit", "Quit", "Quit", "Quit the dashboard (its workers drain first)."),
)
"""Every key of the main screen, in footer and help order."""

BY_ACTION: dict[str, Action] = {a.action: a for a in ACTIONS}
"""Actions by their action string."""

BY_NAME: dict[str, list[Action]] = {}
"""Actions by method name (`enqueue` has three)."""
for _action in ACTIONS:
    BY_NAME.setdefault(_action.name, []).append(_action)


def unavailable(name: str, situation: Situation) -> str | None:
    """Why the action called `name` cannot run now; None if it can (or is not ours)."""
    actions = BY_NAME.get(name)
    return actions[0].unavailable(situation) if actions else None


def bindings() -> list[Binding]:
    """The bindings of the app, from `ACTIONS`."""
    return [action.binding() for action in ACTIONS]
