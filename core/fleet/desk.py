"""The dashboard's job and queue commands and its looks into single jobs: the part of
`BoardControl` that needs only the database (and, for effects, this process's stand-ins).

Every call goes through the `BoardLink`, so none of them can hang on a database that does
not answer; each failure becomes `CommandRefused` with one line saying why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from psycopg import AsyncConnection
from taskboard.core.base.errors import DatabaseUnavailable, TaskboardError, ValidationError
from taskboard.core.engine.settings import DEFAULT_LEASE_SECONDS
from taskboard.core.fleet.link import BoardLink
from taskboard.core.kinds import KindRegistry, builtin_registry
from taskboard.core.operations import job_bulk, queues
from taskboard.core.queue import jobs
from taskboard.core.standins.runtime import Runtime
from taskboard.core.view import inspection
from taskboard.core.view.board import JobDetail, JobListRow, KindAdvice, KindLimitRow
from taskboard.core.view.control import CommandRefused, KindOffer
from taskboard.core.view.health import ClaimSample, HealthReport, Thresholds, read_health
from taskboard.core.view.lease_judgement import KindPolicies, kind_policies

T = TypeVar("T")

SAMPLE_PAYLOADS: dict[str, dict[str, Any]] = {
    "email": {
        "to": "maya@example.com",
        "subject": "Your receipt",
        "text": "Thanks for your order, Maya.",
    },
    "billing": {"customer": "cus_maya", "amount": 1999, "currency": "usd"},
    "sleep": {"seconds": 5.0},
    "noop": {},
}


class JobDesk:
    """Commands on jobs and queues, and reads of one job, of jobs by state, of advice."""

    def __init__(
        self,
        link: BoardLink,
        registry: KindRegistry,
        runtime: Runtime | None,
        *,
        sample_sleep_seconds: float | None = None,
        worker_lease: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self.link = link
        self.registry = registry
        self.runtime = runtime
        self._sample_sleep = sample_sleep_seconds
        self._claims: ClaimSample | None = None  # the last health reading's claim totals
        self.health_thresholds = Thresholds()
        """When the health screen turns amber or red."""
        self.worker_lease = worker_lease
        """The lease of this dashboard's workers: what a kind without its own gets here."""

    async def enqueue_sample(self, kind: str) -> int:
        """Enqueue a sample job of `kind`."""
        payload = dict(SAMPLE_PAYLOADS.get(kind, {}))
        if kind == "sleep" and self._sample_sleep is not None:
            payload["seconds"] = self._sample_sleep
        return await self._command(
            f"enqueueing a {kind} job",
            lambda conn: jobs.enqueue(conn, self.registry, kind, payload),
        )

    def enqueue_kinds(self) -> tuple[KindOffer, ...]:
        """The registry's kinds (with `--app`, the app's), the app's first; each with a
        payload it accepts when one is known (the sample's, or an empty one)."""
        builtins = builtin_registry()
        offers = []
        for name in self.registry.names():
            builtin = builtins.find(name)
            own = builtin is None or builtin.handler is not self.registry.get(name).handler
            sample = None if own else SAMPLE_PAYLOADS.get(name)
            needs = self.payload_problem(name, {})
            offers.append(KindOffer(name, own, sample or ({} if needs is None else None), needs))
        return tuple(sorted(offers, key=lambda o: (not o.app, o.name)))

    def payload_problem(self, kind: str, payload: object) -> str | None:
        """What the registry's validation says of `payload`, or None if it takes it."""
        if self.registry.find(kind) is None:
            return f"unknown job kind {kind!r}"
        try:
            self.registry.validate(kind, payload)
        except ValidationError as exc:
            return str(exc)
        return None

    async def enqueue_job(self, kind: str, payload: dict[str, Any]) -> int:
        """Enqueue one job of `kind`; a payload the kind refuses is refused in one line."""
        return await self._command(
            f"enqueueing a {kind} job",
            lambda conn: jobs.enqueue(conn, self.registry, kind, payload),
        )

    async def retry(self, job_id: int) -> None:
        """Make a dead or cancelled job pending again."""
        await self._command(f"retrying job #{job_id}", lambda conn: jobs.retry(conn, job_id))

    async def cancel_job(self, job_id: int) -> None:
        """Cancel an unfinished job; a worker running it stops within a second."""
        await self._command(f"cancelling job #{job_id}", lambda conn: jobs.cancel(conn, job_id))

    async def pause_queue(self, queue: str, reason: str | None = None) -> None:
        """Stop claims from `queue` across the fleet."""
        await self._command(
            f"pausing queue {queue}", lambda conn: queues.pause_queue(conn, queue, reason)
        )

    async def resume_queue(self, queue: str) -> None:
        """Let claims take from `queue` again."""
        await self._command(
            f"resuming queue {queue}", lambda conn: queues.resume_queue(conn, queue)
        )

    async def job_detail(self, job_id: int) -> JobDetail:
        """One job in full, with the effects this process's stand-ins saw for it."""
        detail = await self._command(
            f"reading job #{job_id}", lambda conn: inspection.job_detail(conn, job_id)
        )
        kind = self.registry.find(detail.kind)
        if kind is not None and detail.timeout_seconds is None:
            detail = dataclasses.replace(detail, kind_timeout_seconds=kind.timeout)
        if self.runtime is None:
            return detail
        return inspection.with_effects(
            detail,
            self.runtime.job_emails(job_id),
            self.runtime.job_charges(job_id),
            f"emails: {self.runtime.email_scope}; charges: {self.runtime.charge_scope}",
        )

    async def list_jobs(self, state: str, needle: str | None = None) -> list[JobListRow]:
        """Jobs in `state`, filtered by kind, queue, id or error text."""
        if state not in inspection.STATES:
            raise CommandRefused(f"no job state {state!r}: {', '.join(inspection.STATES)}")
        return await self._command(
            f"listing {state} jobs", lambda conn: inspection.list_jobs(conn, state, needle=needle)
        )

    async def lease_advice(self) -> list[KindPolicies]:
        """Per kind: its policies and fleet limits, its recorded timings, and `advise`'s
        verdict on its lease."""

        async def read(
            conn: AsyncConnection[Any],
        ) -> tuple[list[KindAdvice], list[KindLimitRow]]:
            return await inspection.lease_advice(conn), await inspection.kind_limits(conn)

        rows, limits = await self._command("reading lease advice", read)
        return kind_policies(self.registry, rows, limits, worker_lease=self.worker_lease)

    async def preview_all(
        self, action: str, state: str, needle: str | None
    ) -> job_bulk.Preview:
        """What `act_on_all` would act on now."""
        kind = _bulk_action(action)
        f = job_bulk.JobFilter(state=state, needle=needle)
        return await self._command(
            f"counting {state} jobs", lambda conn: job_bulk.preview(conn, kind, f)
        )

    async def act_on_all(
        self, action: str, state: str, needle: str | None
    ) -> job_bulk.BulkResult:
        """Retry or cancel every job of the list; each batch re-checks its rows."""
        kind = _bulk_action(action)
        verb = "retrying" if kind == "retry" else "cancelling"
        try:
            run = job_bulk.BulkRun(kind, job_bulk.JobFilter(state=state, needle=needle))
        except TaskboardError as exc:
            raise CommandRefused(str(exc)) from None
        await self._command(f"{verb} {state} jobs", run.start)
        # One batch per call: each answers within the link's timeout however many jobs
        # match, and a database lost half way leaves the batches done so far done.
        while await self._command(f"{verb} {state} jobs ({run.result.done} so far)", run.step):
            pass
        return run.result

    async def queue_health(self) -> HealthReport:
        """The queue's health; the claim time is the mean since the previous reading."""
        report = await self._command(
            "reading queue health",
            lambda conn: read_health(conn, self.health_thresholds, self._claims),
        )
        self._claims = report.sample
        return report

    async def _command(self, what: str, op: Callable[[AsyncConnection[Any]], Awaitable[T]]) -> T:
        try:
            return await self.link.run(what, op)
        except DatabaseUnavailable as exc:
            raise CommandRefused(f"{what}: database unavailable: {exc}") from None
        except TaskboardError as exc:
            raise CommandRefused(str(exc)) from None


def _bulk_action(action: str) -> job_bulk.Action:
    if action == "retry":
        return "retry"
    if action == "cancel":
        return "cancel"
    raise CommandRefused(f"no bulk action {action!r}: retry or cancel")
