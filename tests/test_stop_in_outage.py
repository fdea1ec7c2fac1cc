"""A worker told to stop while its database is unreachable stops within seconds.

Its stop writes two best-effort records: the heartbeat that says "draining" and the row
that says "stopped" (and, with jobs in flight, the release of their leases). None can be
written in an outage, and none is worth waiting an answer limit for: at 5d5e0ee the drain's heartbeat waited for the control connection (held
by the LISTEN, itself waiting up to its limit for a connection the pool could not open), 10
to 21 s at the default lease, so a SIGTERM during an outage took 12-22 s with the database
refusing connections and ~30 s with it silent (`taskboard worker`, measured by hand; 21.6 s
in the first two tests below). Now each record has the stop record's own limit
(`STOP_RECORD_SECONDS`), and a role cancelled in a statement that gets no answer is not
waited for through psycopg's cancel of it (9.0 s in the last test; `ROLE_CANCEL_SECONDS`).

The worker runs at the default lease (60 s: answer limit 11 s), in the test's loop, through
tests/drop_proxy.py, which refuses or silences its connections, or with its backends stopped.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from taskboard.core import builtin_registry, enqueue
from taskboard.core.engine.crew import ROLE_CANCEL_SECONDS
from taskboard.core.engine.events import Claimed, LeftToExpire, Released
from taskboard.core.engine.registration import STOP_RECORD_SECONDS
from taskboard.core.engine.settings import DEFAULT_LEASE_SECONDS, WorkerSettings
from taskboard.core.engine.worker import ExitReason

from tests.conftest import wait_for
from tests.drop_proxy import DropProxy
from tests.harness import Recorder, run_workers

# The drain's heartbeat and the stopped row, one limit each, the roles' cancel, and the
# pool's close (2 s); a second of slack for a busy host. Before: 21.6 s, 21.6 s and 9.0 s.
BOUND = 2 * STOP_RECORD_SECONDS + ROLE_CANCEL_SECONDS + 2.0 + 1.0


async def _stop_timed(running: Any) -> float:
    started = time.monotonic()
    running.worker.drain()
    reason = await asyncio.wait_for(running.task, 60)
    assert reason is ExitReason.DRAINED
    return time.monotonic() - started


async def test_the_default_answer_limit_is_above_the_bound() -> None:
    """The two tests below would wait at least this limit without the fix."""
    assert WorkerSettings(worker_id="w").lease_seconds == DEFAULT_LEASE_SECONDS
    assert WorkerSettings(worker_id="w").answer_timeout > BOUND


async def test_a_worker_stops_within_seconds_while_its_database_refuses_connections(
    db_url: str,
) -> None:
    async with DropProxy.for_url(db_url) as proxy:
        async with run_workers(proxy.url(db_url), "w1") as (running,):
            await proxy.close()  # every flow cut, every new connection refused
            await asyncio.sleep(0.5)  # the roles meet it first, as in an outage
            took = await _stop_timed(running)
    assert took < BOUND, f"stopped {took:.1f} s after it was asked to"


async def test_a_worker_stops_within_seconds_while_its_database_is_silent(
    db_url: str,
) -> None:
    async with DropProxy.for_url(db_url) as proxy:
        async with run_workers(proxy.url(db_url), "w1") as (running,):
            proxy.drop_flows()  # a frozen server: no answer, no error
            proxy.blackhole(True)
            await asyncio.sleep(1.5)  # past a heartbeat (every second): one gets no answer
            took = await _stop_timed(running)
    assert took < BOUND, f"stopped {took:.1f} s after it was asked to"


async def test_a_worker_stops_within_seconds_while_its_backends_are_stopped(
    db_url: str, conn: Any,
) -> None:
    """A statement in flight on a backend that no longer runs (SIGSTOP: the server's other
    processes go on) is cancelled by psycopg when its role is, and psycopg then waits 5 s
    for the statement to end before it closes the connection: the stop no longer waits
    that out (a second cancel makes psycopg close it at once)."""
    async with run_workers(db_url, "w1") as (running,):
        cur = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
        pids = [row[0] for row in await cur.fetchall()]
        assert len(pids) >= 2, pids
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(1.5)  # a heartbeat in flight on a stopped backend
            took = await _stop_timed(running)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
    assert took < BOUND, f"stopped {took:.1f} s after it was asked to"


async def test_a_job_whose_release_the_database_refused_is_told_as_left_to_expire(
    db_url: str, conn: Any,
) -> None:
    """Drained in an outage, a stopped handler's lease cannot be given back: the drain said
    so in a warning only, and whoever counted its jobs (the dashboard's last lines) took
    them for released. Each is now a `LeftToExpire`, and its lease is indeed still held;
    the release gives up within a stop record's limit."""
    recorder = Recorder()
    job_id = await enqueue(conn, builtin_registry(), "sleep", {"seconds": 60})
    async with DropProxy.for_url(db_url) as proxy:
        async with run_workers(proxy.url(db_url), "w1", recorder=recorder,
                               drain_seconds=0.2) as (running,):
            await wait_for(lambda: recorder.of(Claimed, job_id=job_id), timeout=30,
                           what="the sleep job claimed")
            await proxy.close()  # every flow cut, every new connection refused
            took = await _stop_timed(running)
    # Plus the drain's wait for the handler and the release's own limit. Before: 23.0 s,
    # the release waiting for the engine connection, which the claimer held while the
    # pool tried to connect (10 s), then for its own answer limit.
    assert took < BOUND + 0.2 + STOP_RECORD_SECONDS, f"stopped {took:.1f} s after it was asked"
    [left] = recorder.of(LeftToExpire, job_id=job_id)
    assert "release failed" in left.reason
    assert recorder.of(Released, job_id=job_id) == []
    cur = await conn.execute("SELECT lease_token::text FROM taskboard_jobs WHERE id = %s",
                             (job_id,))
    assert await cur.fetchone() == (left.token,)  # held until its lease runs out
