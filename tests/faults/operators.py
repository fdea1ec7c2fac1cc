"""The operator of a fault run: acts on the queue while the faults run, as a person would.

Rate-limited (one action every `gap` seconds on average), seeded (its own RNG, so the fault
plan of a seed does not change), counted in `Observed.operations`. Actions:

- prune:       `prune` with a short retention (every finished job older than a few seconds);
- retry:       `retry` of a random dead or cancelled job;
- prune_retry: a retry that commits while a prune waits on the job's row lock: the race of a
               retry during a long prune, forced (the prune must re-check the state it
               deletes, not trust the snapshot that chose the row);
- cancel:      `cancel` of a random unfinished job;
- cancel_billing: `cancel` of a billing job while its Stripe confirm is in flight;
- pause:       the queue paused for up to a lease and a half, then resumed;
- timeout:     billing jobs with a timeout shorter than the Stripe endpoint's latency;
- schedule:    schedules kept during the run: every second (`* * * * * *`) when a 6-field
               expression is accepted, else every minute, and every two minutes (which a
               worker reading cron in a non-UTC session zone fires at the wrong minutes).

Every retry that returned success is noted with its transaction's time, for the checker.
An action that meets a fault (a restart, a read-only server) is counted as failed and the
operator goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
from taskboard.core.base.errors import JobNotFound, ValidationError
from taskboard.core.kinds import builtin_registry
from taskboard.core.operations.queues import pause_queue, resume_queue
from taskboard.core.operations.retention import Retention, prune, prune_batch
from taskboard.core.operations.schedules import Schedule, add_schedule, remove_schedule
from taskboard.core.queue import job_commands
from taskboard.core.queue.jobs import NewJob
from taskboard.core.standins.stripe_endpoint import StripeEndpoint

from tests.faults.checker import Observed, RetryDone, ScheduleRun, Window

# Weights of the actions; `schedule` is not drawn (the schedules live for the whole run).
OPERATOR_WEIGHTS: Mapping[str, float] = {
    "prune": 2, "retry": 2, "prune_retry": 1.5, "cancel": 2, "cancel_billing": 1,
    "pause": 1, "timeout": 1,
}
# Safe on code that keeps invariants 14 and 15 and quick: for the short run in the suite.
SHORT_WEIGHTS: Mapping[str, float] = {
    "prune": 2, "retry": 2, "prune_retry": 1, "cancel": 2, "pause": 1, "timeout": 1,
}
QUEUE = "default"
EVERY_SECOND = "* * * * * *"
EVERY_MINUTE = "* * * * *"
EVERY_TWO_MINUTES = "*/2 * * * *"
PRUNE_BATCH = 100_000  # one batch: every finished job past its age is a candidate at once


@dataclass
class OperatorConfig:
    """How the operator acts."""

    weights: Mapping[str, float] = field(default_factory=lambda: dict(OPERATOR_WEIGHTS))
    gap: float = 1.0  # mean seconds between actions (uniform in [0.2, 2 * gap])
    retention: float = 3.0  # prune every finished job older than this
    schedules: bool = True
    max_attempts: int = 30


class Operator:
    """Acts on the database of one fault run until `stop` is set."""

    def __init__(
        self,
        url: str,
        config: OperatorConfig,
        seen: Observed,
        stripe: StripeEndpoint,
        *,
        seed: int,
        lease: float,
        enqueue: Callable[[list[NewJob]], Awaitable[None]],
        log: Callable[[str], None],
        started: float,
    ) -> None:
        self.url = url
        self.config = config
        self.seen = seen
        self.stripe = stripe
        self.lease = lease
        self.rng = random.Random(seed ^ 0x0BE7A702)
        self._enqueue = enqueue
        self._log = log
        self._started = started
        self._conn: psycopg.AsyncConnection[Any] | None = None

    # --- connections -----------------------------------------------------------------------

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self.url, autocommit=True, connect_timeout=5)

    async def _db(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = await self._connect()
        return self._conn

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
        self._conn = None

    async def _fetch(self, query: Any, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        conn = await self._db()
        cur = await conn.execute(query, params)
        return await cur.fetchall()

    async def _now(self) -> datetime:
        rows = await self._fetch("SELECT now()")
        return rows[0][0]  # type: ignore[no-any-return]

    # --- the run ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Create the run's schedules (before the faults)."""
        if not self.config.schedules:
            return
        registry = builtin_registry()
        conn = await self._db()
        first = EVERY_SECOND
        for name, cron in (("fault-often", first), ("fault-two-minutes", EVERY_TWO_MINUTES)):
            schedule = Schedule(name, cron, "noop", max_attempts=self.config.max_attempts)
            try:
                await add_schedule(conn, registry, schedule)
            except ValidationError as exc:
                if cron != EVERY_SECOND:
                    raise
                # A 6-field expression refused: the every-minute schedule stands in for it.
                self._note(f"schedule {cron!r} refused ({exc}); every minute instead")
                cron = EVERY_MINUTE
                await add_schedule(conn, registry, Schedule(name, cron, "noop",
                                                            max_attempts=self.config.max_attempts))
            self.seen.schedules.append(ScheduleRun(name, cron, await self._now()))
            self.seen.operations["schedule"] += 1
            self._note(f"schedule {name} every {cron!r}")

    async def run(self, stop: asyncio.Event) -> None:
        """Act until `stop` is set; each action's failure is counted, never raised."""
        names = [n for n, w in self.config.weights.items() if w > 0 and n != "schedule"]
        if not names:
            return
        weights = [self.config.weights[n] for n in names]
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.rng.uniform(0.2, 2 * self.config.gap))
            if stop.is_set():
                break
            action = self.rng.choices(names, weights=weights)[0]
            try:
                detail = await getattr(self, f"_{action}")()
            except (psycopg.Error, OSError, JobNotFound) as exc:
                self.seen.operations[f"{action}_failed"] += 1
                await self.close()
                self._note(f"{action} failed: {type(exc).__name__}: {str(exc)[:160]}")
                continue
            self.seen.operations[action] += 1
            self._note(f"{action}: {detail}")

    async def finish(self) -> None:
        """Resume the queue and remove the schedules (so the queue can drain)."""
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            try:
                await self._resume()
                conn = await self._db()
                for index, run in enumerate(self.seen.schedules):
                    if run.removed_at is None:
                        with contextlib.suppress(JobNotFound):
                            await remove_schedule(conn, run.name)
                        self.seen.schedules[index] = ScheduleRun(
                            run.name, run.cron, run.added_at, await self._now()
                        )
                return
            except psycopg.Error:
                await self.close()
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.2)

    def _note(self, line: str) -> None:
        at = asyncio.get_running_loop().time() - self._started
        self._log(f"t={at:.1f}s operator {line}")

    # --- actions ---------------------------------------------------------------------------

    def _excluded(self) -> list[int]:
        """Rows whose fate the checker judges by itself (left alone)."""
        s = self.seen
        return [*s.malformed_ids, *s.unknown_ids, *s.poison_ids, *s.oversized_ids]

    async def _pick(self, where: str, *params: Any) -> int | None:
        """A random job of the built-in kinds matching `where` (not one the checker
        judges by itself)."""
        rows = await self._fetch(
            "SELECT id FROM taskboard_jobs WHERE " + where + " AND kind = ANY(%s)"
            " AND id <> ALL(%s) ORDER BY random() LIMIT 1",
            (*params, ["noop", "sleep", "email", "billing"], self._excluded()),
        )
        return int(rows[0][0]) if rows else None

    async def _prune(self) -> str:
        done = await prune(await self._db(), Retention.all_older_than(self.config.retention),
                           batch=PRUNE_BATCH)
        return "skipped (another prune ran)" if done.skipped else f"{done.jobs} jobs deleted"

    async def _retry(self) -> str:
        job_id = await self._pick("(failed_at IS NOT NULL OR cancelled_at IS NOT NULL)")
        if job_id is None:
            return "nothing dead or cancelled"
        conn = await self._db()
        try:
            async with conn.transaction():
                await job_commands.retry(conn, job_id)
                cur = await conn.execute("SELECT now()")
                row = await cur.fetchone()
        except JobNotFound as exc:
            return f"refused: {exc}"
        assert row is not None
        self.seen.retries.append(RetryDone(job_id, row[0]))
        return f"job {job_id}"

    async def _prune_retry(self) -> str:
        """Retry a job a running prune has chosen, committing while the prune waits on it."""
        retention = Retention.all_older_than(self.config.retention)
        age = float(self.config.retention) + 0.5  # still past it when the prune looks
        job_id = await self._pick(
            "(failed_at < now() - make_interval(secs => %s)"
            " OR cancelled_at < now() - make_interval(secs => %s))", age, age
        )
        if job_id is None:
            return "nothing dead or cancelled past the retention"
        async with await self._connect() as retrier, await self._connect() as pruner:
            await retrier.set_autocommit(False)
            try:
                await job_commands.retry(retrier, job_id)
            except JobNotFound as exc:
                await retrier.rollback()
                return f"refused: {exc}"
            cur = await retrier.execute("SELECT now()")
            row = await cur.fetchone()
            assert row is not None
            pruned = asyncio.create_task(prune_batch(pruner, retention, PRUNE_BATCH))
            waited = await self._wait_blocked(pruner.info.backend_pid, pruned)
            await retrier.commit()
            self.seen.retries.append(RetryDone(job_id, row[0]))
            deleted = await asyncio.wait_for(pruned, 30)
        how = "blocked on the retried row" if waited else "did not wait on it"
        return f"job {job_id} retried while a prune ({how}) deleted {deleted}"

    async def _wait_blocked(self, pid: int, task: asyncio.Task[Any], limit: float = 3.0) -> bool:
        """True once backend `pid` waits on a lock (or False when `task` ends or at `limit`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        while loop.time() < deadline and not task.done():
            rows = await self._fetch(
                "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)
            )
            if rows and rows[0][0]:
                return True
            await asyncio.sleep(0.02)
        return False

    async def _cancel(self) -> str:
        job_id = await self._pick(
            "completed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL"
        )
        if job_id is None:
            return "nothing unfinished"
        try:
            await job_commands.cancel(await self._db(), job_id)
        except JobNotFound as exc:
            return f"refused: {exc}"
        return f"job {job_id}"

    async def _cancel_billing(self) -> str:
        """Cancel a billing job while Stripe takes its time answering the confirm."""
        latency = self.lease * self.rng.uniform(0.5, 0.9)
        self.stripe.set_latency(latency)
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 3 * latency + 2
            while loop.time() < deadline:
                # Past the create request: the confirm is on its way or in flight.
                job_id = await self._pick(
                    "kind = 'billing' AND lease_token IS NOT NULL"
                    " AND claimed_at < now() - make_interval(secs => %s)", latency * 1.1
                )
                if job_id is not None:
                    await asyncio.sleep(self.rng.uniform(0.0, latency / 2))
                    try:
                        await job_commands.cancel(await self._db(), job_id)
                    except JobNotFound as exc:
                        return f"refused: {exc}"
                    return f"job {job_id} cancelled with Stripe {latency:.2f}s late"
                await asyncio.sleep(0.05)
            return "no billing job in its confirm"
        finally:
            self.stripe.set_latency(0)

    async def _pause(self) -> str:
        seconds = self.lease * self.rng.uniform(0.3, 1.5)
        conn = await self._db()
        start = datetime.now(UTC)
        await pause_queue(conn, QUEUE, "fault harness operator")
        try:
            await asyncio.sleep(seconds)
        finally:
            await self._resume()
            self.seen.windows.append(Window("pause", None, start, datetime.now(UTC)))
        return f"queue {QUEUE} paused {seconds:.1f}s"

    async def _resume(self, limit: float = 60.0) -> None:
        """Resume the queue, through restarts and read-only spells: a pause the operator
        forgot would starve the fleet and be blamed on the workers."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        while True:
            try:
                with contextlib.suppress(JobNotFound):
                    await resume_queue(await self._db(), QUEUE)
                return
            except (psycopg.Error, OSError):
                await self.close()
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.1)

    async def _timeout(self) -> str:
        """Billing jobs whose timeout ends during their confirm (one attempt each)."""
        latency = self.lease * self.rng.uniform(0.5, 0.8)
        timeout = round(latency * 1.5, 2)
        count = self.rng.randint(1, 3)
        self.stripe.set_latency(latency)
        try:
            await self._enqueue([
                NewJob("billing", {"customer": f"cus_timeout{self.rng.randrange(10**6)}",
                                   "amount": self.rng.randint(100, 9_999),
                                   "currency": "usd"},
                       max_attempts=1, timeout=timeout)
                for _ in range(count)
            ])
            await asyncio.sleep(2 * latency + timeout)
        finally:
            self.stripe.set_latency(0)
        return f"{count} billing job(s), timeout {timeout:g}s, Stripe {latency:.2f}s late"
