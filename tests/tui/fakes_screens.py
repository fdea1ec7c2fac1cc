"""A small `BoardControl` for the job, jobs, advice and confirm screens, and fixed data.

Only the reads and commands those screens use are here: `job_detail`, `list_jobs`,
`lease_advice`, `retry`, `cancel_job`. Every timestamp derives from `DB_NOW` so snapshots
are the same on every run. `hang` makes every read wait forever (a database that never
answers); `refuse` makes it raise `CommandRefused` with that one line.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from taskboard.core.view.board import (
    AttemptRow,
    ChargeRecord,
    EmailCopy,
    JobDetail,
    JobListRow,
    KindAdvice,
    SendRecord,
    Trends,
)
from taskboard.core.view.control import CommandRefused
from taskboard.core.view.health import HealthReport
from taskboard.core.view.lease_judgement import KindPolicies, judge
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.message import Message
from textual.notifications import Notify
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Static

DB_NOW = datetime(2026, 3, 14, 9, 26, 53, tzinfo=UTC)
"""The database clock of every fixture."""

SETTLE_SECONDS = 10.0
"""Upper bound for a wait on a condition; reaching it means the screen is stuck."""

DECLINED = (
    "card declined (HTTP 402): Your card has insufficient funds. request_id=req_7Hq2Lw9xT4; "
    "decline_code=insufficient_funds; the charge was not created and no money moved; "
    "see https://stripe.com/docs/declines#insufficient-funds — END-OF-ERROR"
)
"""A long error whose end must reach the screen (the test looks for END-OF-ERROR)."""


def at(seconds: float) -> datetime:
    """`DB_NOW` shifted by `seconds`."""
    return DB_NOW + timedelta(seconds=seconds)


def token(n: int) -> str:
    """A deterministic UUID-shaped lease token."""
    return f"{n:08x}-7c1e-4b2a-9d3f-{n * 7919:012x}"


def billing_detail() -> JobDetail:
    """A dead billing job: a lost lease whose late completion was fenced, a declined card
    twice, an unrecorded charge and a replayed one."""
    return JobDetail(
        id=42,
        kind="billing",
        queue="payments",
        state="dead",
        payload={"customer": "cus_maya", "amount": 1999, "currency": "usd", "card": "***"},
        attempts_used=3,
        max_attempts=3,
        run_at=at(-600),
        created_at=at(-601),
        finished_at=at(-95.25),
        last_error=DECLINED,
        unique_key="order-7731",
        timeout_seconds=30.0,
        holder=None,
        lease_expires_at=None,
        attempts=(
            AttemptRow(1, token(11), "opsbox-1", at(-600), at(-571.4), at(-588.0), at(-590.0),
                       "completion_rejected", None, 0.012, 28.6, 0.0),
            AttemptRow(2, token(12), "opsbox-2", at(-588.0), at(-586.1), None, None,
                       "failed", DECLINED, 0.004, 1.9, 8.1),
            AttemptRow(3, token(13), "batch-07", at(-97.0), at(-95.25), None, None,
                       "failed", DECLINED, 0.031, 1.75, 8.25),
        ),
        emails=(),
        charges=(
            ChargeRecord("pi_3PzAl2Lw9xT4ab", 1999, "usd", 1, False, at(-575.2)),
            ChargeRecord("pi_3PzAl9Qv1mZ2cd", 1999, "usd", 0, True, at(-586.5), attempt=2,
                         worker="opsbox-2", status="succeeded"),
        ),
        effects_scope="emails: this dashboard's SMTP sink; charges: this dashboard's Stripe "
        "endpoint",
    )


def email_detail() -> JobDetail:
    """A running email job: its first copy sent by a worker that lost the lease."""
    return JobDetail(
        id=23,
        kind="email",
        queue="default",
        state="running",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        payload={"to": "maya@example.com", "subject": "Your receipt", "api_key": "***"},
        attempts_used=2,
        max_attempts=5,
        run_at=at(-40),
        created_at=at(-40),
        finished_at=None,
        last_error=None,
        unique_key=None,
        timeout_seconds=None,
        holder="opsbox-2",
        lease_expires_at=at(6.5),
        attempts=(
            AttemptRow(1, token(21), "opsbox-1", at(-40), at(-12), at(-25), None,
                       "lease_lost", "lease lost: local deadline passed", 0.01, None, 3.3),
            AttemptRow(2, token(22), "opsbox-2", at(-25), None, None, None,
                       None, None, 0.02, None, 6.5),
        ),
        emails=(
            EmailCopy(at(-30.5), "<job-23@taskboard.local>", 1, "opsbox-1"),
            EmailCopy(at(-20.25), "<job-23@taskboard.local>", 2, "opsbox-2"),
        ),
        sends=(
            SendRecord(at(-30.5), "<job-23@taskboard.local>", "maya@example.com", 1, "opsbox-1"),
            SendRecord(at(-20.25), "<job-23@taskboard.local>", "maya@example.com", 2,
                       "opsbox-2"),
        ),
        effects_scope="emails: this dashboard's SMTP sink; charges: none here",
    )


def pending_detail(job_id: int = 7) -> JobDetail:
    """A pending job never claimed."""
    return JobDetail(
        id=job_id, kind="sleep", queue="default", state="pending", payload={"seconds": 5.0},
        attempts_used=0, max_attempts=5, run_at=at(-3), created_at=at(-3), finished_at=None,
        last_error=None, unique_key=None, timeout_seconds=None, holder=None,
        lease_expires_at=None,
    )


def row(job_id: int, kind: str, *, queue: str = "default", error: str = "",
        attempts: int = 1, worker: str | None = None, age: float = 0.0,
        finished: bool = False, lease: float | None = None) -> JobListRow:
    """A job list row created `age` seconds before `DB_NOW`."""
    return JobListRow(
        id=job_id, kind=kind, queue=queue, priority=0, attempts=attempts, max_attempts=5,
        run_at=at(-age), created_at=at(-age - 1), finished_at=at(-age + 2) if finished else None,
        claimed_by=worker, lease_expires_at=at(lease) if lease is not None else None,
        last_error=error,
    )


def sample_jobs() -> dict[str, list[JobListRow]]:
    """Jobs in every state, with errors long enough to need the whole width."""
    return {
        "pending": [
            row(51, "email", age=4, attempts=0),
            row(49, "billing", queue="payments", age=9, attempts=2,
                error="connection reset by peer while reading the response from api.stripe.com"),
            row(53, "sleep", age=2, attempts=0),
        ],
        "scheduled": [row(60, "email", age=-120, attempts=0)],
        "running": [
            row(23, "email", worker="opsbox-2", age=40, attempts=2, lease=6.5,
                error="lease lost: local deadline passed"),
            row(31, "sleep", worker="opsbox-1", age=12, lease=48.0),
        ],
        "completed": [row(k, "email", finished=True, age=300 - k, worker="opsbox-1")
                      for k in range(1, 6)],
        "dead": [
            row(42, "billing", queue="payments", attempts=3, finished=True, age=97,
                worker="batch-07", error=DECLINED),
            row(17, "email", attempts=5, finished=True, age=400, worker="opsbox-1",
                error="SMTP 550 5.1.1 <nobody@example.com>: recipient address rejected: "
                "user unknown in virtual mailbox table"),
            row(8, "noop", attempts=1, finished=True, age=900, worker="opsbox-2",
                error="payload: noop takes no fields, got ['x']"),
        ],
        "cancelled": [],
    }


def sample_advice() -> list[KindPolicies]:
    """Four kinds: a limited one whose lease fits, one whose renewals came late, one whose
    lease is far too long, and an app kind with its own lease and a rate limit that has
    not run yet (312 jobs waiting on its limit). Verdicts are `judge`'s own."""

    def row(kind: str, samples: int, p99: float, margin: float | None,
            lease: float) -> KindAdvice:
        return KindAdvice(kind, samples, p99 / 4, p99, p99 * 1.2, margin, lease)

    billing = row("billing", 412, 2.4, 52.0, 60.0)
    email = row("email", 2381, 0.84, 4.0, 30.0)
    noop = row("noop", 9120, 0.004, None, 600.0)
    return [
        KindPolicies("billing", 60.0, False, 30.0, 3, 2, None, 2, 5, billing,
                     judge(billing, None)),
        KindPolicies("email", 30.0, False, None, None, None, None, 0, 0, email,
                     judge(email, None)),
        KindPolicies("noop", 600.0, False, None, None, None, None, 0, 0, noop,
                     judge(noop, None)),
        KindPolicies("square", 5.0, True, None, None, None, 14.0, 0, 312, None, None),
    ]


def sample_trends() -> Trends:
    """Five minutes in 5 s buckets: a burst of work, a stall with lost leases, recovery."""
    n = 60
    completed = tuple(float((i * 7) % 11) / 2 + (6.0 if 30 <= i < 40 else 0.0) for i in range(n))
    pickup = tuple(None if i < 3 else 0.02 + ((i * 5) % 9) / 100 for i in range(n))
    lateness = tuple(None if i < 3 else (1.8 if i == 44 else ((i * 3) % 7) / 100)
                     for i in range(n))
    lost = tuple(2 if i == 44 else (1 if i == 45 else 0) for i in range(n))
    return Trends(step=5.0, completed_per_s=completed, pickup_p50=pickup,
                  renewal_lateness=lateness, lost=lost)


@dataclass
class ScreensControl:
    """The reads and commands the screens use, from fixed data, recording every call."""

    details: dict[int, JobDetail] = field(
        default_factory=lambda: {d.id: d for d in (billing_detail(), email_detail(),
                                                   pending_detail())})
    jobs: dict[str, list[JobListRow]] = field(default_factory=sample_jobs)
    advice: list[KindPolicies] = field(default_factory=sample_advice)
    calls: list[tuple[str, object]] = field(default_factory=list)
    """Every call, in order, e.g. `("retry", 42)` or `("list_jobs", ("dead", None))`."""
    hang: bool = False
    """Reads never answer (a frozen database)."""
    refuse: str | None = None
    """Reads and commands raise `CommandRefused(refuse)`."""
    gate: asyncio.Event | None = None
    """When set, every read waits for this event first (to hold one read in flight)."""

    def count(self, name: str) -> int:
        """How many calls of `name` were made."""
        return sum(1 for called, _ in self.calls if called == name)

    def sent(self, name: str) -> list[object]:
        """Arguments of every `name` call."""
        return [argument for called, argument in self.calls if called == name]

    async def _answer(self, name: str, argument: object) -> None:
        self.calls.append((name, argument))
        if self.hang:
            await asyncio.Event().wait()
        if self.gate is not None:
            await self.gate.wait()
        if self.refuse is not None:
            raise CommandRefused(self.refuse)

    async def job_detail(self, job_id: int) -> JobDetail:
        await self._answer("job_detail", job_id)
        if job_id not in self.details:
            raise CommandRefused(f"job {job_id} does not exist (or was pruned)")
        return self.details[job_id]

    async def list_jobs(self, state: str, needle: str | None = None) -> list[JobListRow]:
        await self._answer("list_jobs", (state, needle))
        rows = self.jobs.get(state, [])
        if not needle:
            return list(rows)
        low = needle.strip().lower()
        return [r for r in rows if low in r.kind.lower() or low in r.queue.lower()
                or low == str(r.id) or low in r.last_error.lower()]

    async def lease_advice(self) -> list[KindPolicies]:
        await self._answer("lease_advice", None)
        return list(self.advice)

    async def queue_health(self) -> HealthReport:
        await self._answer("queue_health", None)
        from tests.tui.sample_board import sample_health

        return sample_health()

    async def retry(self, job_id: int) -> None:
        await self._answer("retry", job_id)

    async def cancel_job(self, job_id: int) -> None:
        await self._answer("cancel_job", job_id)


class Host(App[None]):
    """A bare app to push one screen on: no refresh loop, fixed theme."""

    CSS = "Screen { background: $background; }"

    def __init__(self, screen: Screen[object] | None = None) -> None:
        super().__init__()
        self.first = screen
        self.theme = "textual-dark"

    def compose(self) -> ComposeResult:
        yield Static("host screen", id="host")

    def on_mount(self) -> None:
        if self.first is not None:
            self.push_screen(self.first)


@dataclass
class Hosted:
    """A running host app, its pilot, and the notifications it posted."""

    app: Host
    pilot: Pilot[None]
    notifications: list[Notify] = field(default_factory=list)

    def said(self) -> list[str]:
        return [n.notification.message for n in self.notifications]

    async def until(self, predicate: object, what: str) -> None:
        """Let the app run until `predicate()` holds; fail naming `what` at the deadline."""
        assert callable(predicate)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_SECONDS
        while not predicate():
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await self.pilot.pause(0.01)


@asynccontextmanager
async def hosting(screen: Screen[object] | None = None,
                  size: tuple[int, int] = (120, 40)) -> AsyncIterator[Hosted]:
    """Run a `Host` with `screen` pushed until the block ends."""
    app = Host(screen)
    notifications: list[Notify] = []

    def hook(message: Message) -> None:
        if isinstance(message, Notify):
            notifications.append(message)

    async with app.run_test(size=size, message_hook=hook) as pilot:
        await pilot.pause()
        yield Hosted(app, pilot, notifications)


# --- scenes: the screens at fixed sizes, for snapshot tests and screenshots ---------------

SMALL = (80, 24)
"""The classic terminal."""

LARGE = (160, 45)
"""A roomy terminal."""


@dataclass
class ScreenScene:
    """One screen to capture (the shape `screenshots/generate.py` renders): how to build
    the app and how to bring it to the moment to capture."""

    name: str
    size: tuple[int, int]
    app: App[None]
    prepare: Callable[[Pilot[None]], Awaitable[None]]


async def quiet(pilot: Pilot[None], done: Callable[[], bool], what: str) -> None:
    """Wait until `done()` holds and no worker of the app runs, then one more frame."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_SECONDS
    while not done() or any(w.is_running for w in pilot.app.workers):
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.01)
    await pilot.pause()


def _on_screen(kind: type[Screen[Any]], ready: Callable[[Any], bool]) -> Callable[
        [Pilot[None]], Awaitable[None]]:
    async def prepare(pilot: Pilot[None]) -> None:
        def done() -> bool:
            screen = pilot.app.screen
            return isinstance(screen, kind) and ready(screen)

        await quiet(pilot, done, f"{kind.__name__} to show its data")

    return prepare


def confirm_scene(size: tuple[int, int]) -> ScreenScene:
    """The question `r` asks on a dead billing job's detail."""
    from taskboard.tui.screens.confirm import ConfirmScreen

    question = ("Retry dead job #42 (billing on payments)? It becomes pending and runs again "
                "from the start. This is a billing job: running it again may charge the "
                "customer again.")
    screen = ConfirmScreen(question, yes="Retry job #42")
    return ScreenScene(_name("confirm", size), size, Host(screen),
                       _on_screen(ConfirmScreen, lambda s: s.focused is not None))


def detail_scene(size: tuple[int, int], job_id: int = 42, name: str = "job-detail") -> ScreenScene:
    """A job's detail from fixed data."""
    from taskboard.tui.screens.job_detail import JobDetailScreen

    screen = JobDetailScreen(ScreensControl(), job_id)  # type: ignore[arg-type]
    return ScreenScene(_name(name, size), size, Host(screen),
                       _on_screen(JobDetailScreen, lambda s: s.detail is not None))


def jobs_scene(size: tuple[int, int], state: str = "dead") -> ScreenScene:
    """Jobs of one state from fixed data, no auto-refresh."""
    from taskboard.tui.screens.jobs import JobsScreen

    screen = JobsScreen(ScreensControl(), state, refresh_seconds=0)  # type: ignore[arg-type]
    return ScreenScene(_name("jobs", size), size, Host(screen),
                       _on_screen(JobsScreen, lambda s: s.answered))


def advice_scene(size: tuple[int, int]) -> ScreenScene:
    """Policies and lease advice for four kinds: ok and limited, too short, too long, not
    run yet and rate-limited."""
    from taskboard.tui.screens.advice import AdviceScreen

    screen = AdviceScreen(ScreensControl())  # type: ignore[arg-type]
    return ScreenScene(_name("advice", size), size, Host(screen),
                       _on_screen(AdviceScreen, lambda s: s.advice is not None))


def health_scene(size: tuple[int, int]) -> ScreenScene:
    """Queue health, red: a report session has held a snapshot for 20 minutes."""
    from taskboard.tui.screens.health import HealthScreen

    screen = HealthScreen(ScreensControl(), every=None)  # type: ignore[arg-type]
    return ScreenScene(_name("health", size), size, Host(screen),
                       _on_screen(HealthScreen, lambda s: s.report is not None))


class TrendsHost(App[None]):
    """The trends panel alone at the top of a screen, as the dashboard would place it."""

    def __init__(self, trends: Trends) -> None:
        super().__init__()
        self.trends = trends
        self.theme = "textual-dark"

    def compose(self) -> ComposeResult:
        from taskboard.tui.widgets.trends import TrendsPanel

        yield TrendsPanel(id="trends")

    def on_mount(self) -> None:
        from taskboard.tui.format import Colours
        from taskboard.tui.widgets.trends import TrendsPanel

        colours = Colours.from_theme(self.get_css_variables())
        self.query_one(TrendsPanel).show(self.trends, colours)


def trends_scene(size: tuple[int, int]) -> ScreenScene:
    """Five minutes of trends: a burst, a stall with lost leases and late renewals."""
    app = TrendsHost(sample_trends())

    async def prepare(pilot: Pilot[None]) -> None:
        await quiet(pilot, lambda: True, "the trends panel")

    return ScreenScene(_name("trends", size), size, app, prepare)


def _name(stem: str, size: tuple[int, int]) -> str:
    return f"{stem}-{size[0]}x{size[1]}"


def screen_scenes() -> list[ScreenScene]:
    """Every new screen at both sizes, freshly built (apps run once)."""
    return [
        *(confirm_scene(size) for size in (SMALL, LARGE)),
        *(detail_scene(size) for size in (SMALL, LARGE)),
        detail_scene(LARGE, 23, "job-detail-email"),
        *(jobs_scene(size) for size in (SMALL, LARGE)),
        *(advice_scene(size) for size in (SMALL, LARGE)),
        *(trends_scene(size) for size in (SMALL, LARGE)),
        *(health_scene(size) for size in (SMALL, LARGE)),
    ]


def shown_text(widget: Widget) -> str:
    """The text `widget` draws, border and padding included, line by line (wrapping
    included)."""
    region = Region(0, 0, widget.outer_size.width, widget.outer_size.height)
    return "\n".join(strip.text.rstrip() for strip in widget.render_lines(region))
