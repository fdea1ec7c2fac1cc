"""`taskboard_jobs` for the metrics endpoint: the jobs by queue and state, read at each
scrape by one short query on a connection of its own, bounded on both sides (server-side
`statement_timeout`, and a client-side limit that closes the socket: a frozen server never
runs `statement_timeout`). A scrape the database does not answer still serves every other
series, and counts the miss in `taskboard_scrape_errors_total`. See
`taskboard.core.runtime.metrics`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from psycopg import AsyncConnection
from taskboard.core import sql
from taskboard.core.base.secrets import mask_text

log = logging.getLogger("taskboard.metrics")
T = TypeVar("T")
JOB_STATES = ("pending", "scheduled", "running", "completed", "dead", "cancelled")
"""Every state `taskboard_jobs` reports for every queue, always."""


Counts = list[tuple[str, str, int]]
Limited = list[tuple[str, int]]


async def read_job_counts(url: str, timeout: float) -> tuple[Counts, Limited]:
    """(queue, state, jobs) from `JOB_COUNTS_BY_QUEUE`, and (kind, due jobs waiting on its
    fleet limit) from `KIND_LIMITS`, on a connection of its own, within `timeout` seconds
    or `TimeoutError`."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    conn: AsyncConnection[Any] | None = None
    fired = False

    def expire() -> None:
        nonlocal fired
        fired = True
        if conn is not None:
            conn.pgconn.finish()  # closing, not cancelling: see core/engine/connection.py
        task.cancel()

    timer = loop.call_later(timeout, expire)
    try:
        conn = await AsyncConnection.connect(
            url, autocommit=True, connect_timeout=max(2, round(timeout)),
            application_name="taskboard-metrics",
        )
        await conn.execute(
            "SELECT set_config('statement_timeout', %s, false)", (f"{int(timeout * 1000)}ms",)
        )
        cur = await conn.execute(sql.JOB_COUNTS_BY_QUEUE)
        counts = [(str(q), str(s), int(n)) for q, s, n in await cur.fetchall()]
        cur = await conn.execute(sql.KIND_LIMITS)
        return counts, [(str(row[0]), int(row[4])) for row in await cur.fetchall()]
    except asyncio.CancelledError:
        if fired:
            raise TimeoutError(f"no answer within {timeout:g} s") from None
        raise
    finally:
        timer.cancel()
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on a loop of its own: here if this thread has none running (the HTTP
    server's threads), else on a helper thread (`render()` called from async code)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=run, name="taskboard-metrics-scrape", daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


class JobsCollector:
    """`taskboard_jobs`, read at each scrape, with `taskboard_database_up` and
    `taskboard_scrape_errors_total` (emitted here, so a miss shows in the same scrape)."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        self.errors = 0
        self._lock = threading.Lock()

    def describe(self) -> Iterable[Metric]:
        return self._families([], [], up=False)

    def collect(self) -> Iterable[Metric]:
        try:
            counts, limited = _run(read_job_counts(self.url, self.timeout))
        except Exception as exc:
            with self._lock:
                self.errors += 1
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            log.warning("metrics: could not read job counts (%s: %s)",
                        type(exc).__name__, mask_text(detail))
            return self._families([], [], up=False)
        return self._families(counts, limited, up=True)

    def _families(self, counts: Counts, limited: Limited, *, up: bool) -> list[Metric]:
        jobs = GaugeMetricFamily(
            "taskboard_jobs", "Jobs by queue and state (finished ones as counted by the "
            "trigger, until pruned)", labels=["queue", "state"],
        )
        # Every state of every queue seen, zero when it has none: a series that comes and
        # goes reads as "no data" in a dashboard and breaks rate() and alert rules.
        by_queue: dict[str, dict[str, int]] = {}
        for queue, state, n in counts:
            by_queue.setdefault(queue, dict.fromkeys(JOB_STATES, 0))[state] = n
        for queue, states in sorted(by_queue.items()):
            for state, n in states.items():
                jobs.add_metric([queue, state], n)
        waiting = GaugeMetricFamily(
            "taskboard_kind_limited_jobs", "Due jobs of a kind with a fleet-wide limit "
            "(max_running, rate_per_second) not claimed yet: waiting on the limit",
            labels=["kind"],
        )
        for kind, n in limited:
            waiting.add_metric([kind], n)
        database = GaugeMetricFamily(
            "taskboard_database_up", "1 if this scrape read the job counts from the database",
            value=1 if up else 0,
        )
        with self._lock:
            errors = self.errors
        scrape = CounterMetricFamily(
            "taskboard_scrape_errors", "Scrapes whose job counts the database did not answer",
            value=errors,
        )
        return [jobs, waiting, database, scrape]
