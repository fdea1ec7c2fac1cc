"""One `taskboard worker` process against a database that restarts or cuts it off.

Two promises, each small enough to show alone what the long fault run may hit by chance:
- after the database comes back, a worker is working again within a few leases (not after
  failing once per dead pooled connection, each time waiting longer);
- its stderr stays one JSON object per line, even while connections are dropped (the
  database driver's and the pool's own warnings included).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg

from tests.conftest import wait_for
from tests.faults.conftest import RestartableDb
from tests.faults.harness import spawn_worker, terminate_backends

LEASE = 1.0


async def _worker_row_running(url: str, worker_id: str) -> bool:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT 1 FROM taskboard_workers WHERE id = %s AND state = 'running'", (worker_id,)
        )
        return await cur.fetchone() is not None


@asynccontextmanager
async def worker_process(url: str, worker_id: str, log: Path) -> AsyncIterator[Any]:
    """A worker process (lease 1 s, pool 10) that is registered on entry, SIGTERMed on exit."""
    proc = spawn_worker(url, worker_id, log, lease=LEASE, pool_size=10, poll=0.5)
    try:
        await wait_for(lambda: _worker_row_running(url, worker_id), timeout=30,
                       what=f"{worker_id} to register")
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(proc.wait, 20)
        finally:
            if proc.poll() is None:
                proc.kill()


async def _enqueue_noop(url: str) -> int:
    for _ in range(100):  # the server may still be coming back
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                cur = await conn.execute(
                    "INSERT INTO taskboard_jobs (kind) VALUES ('noop') RETURNING id"
                )
                row = await cur.fetchone()
                assert row is not None
                return int(row[0])
        except psycopg.OperationalError:
            await asyncio.sleep(0.1)
    raise AssertionError("the database did not come back")


async def _completed(url: str, job_id: int) -> bool:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT completed_at IS NOT NULL FROM taskboard_jobs WHERE id = %s", (job_id,)
        )
        row = await cur.fetchone()
        return bool(row and row[0])


async def test_idle_worker_works_again_within_a_few_leases_of_a_restart(
    fault_db: RestartableDb, tmp_path: Path
) -> None:
    url, restart = fault_db
    async with worker_process(url, "rw", tmp_path / "rw.log") as proc:
        await asyncio.sleep(LEASE)  # idle: its pooled connections sit unused
        await asyncio.to_thread(restart)
        back = time.monotonic()
        job_id = await _enqueue_noop(url)
        await wait_for(lambda: _completed(url, job_id), timeout=10, what="a job after restart")
        took = time.monotonic() - back
        assert proc.poll() is None
    # One lease to notice, one to reconnect, one of slack: a pool full of connections the
    # restart killed must not be discovered one failed claim (and one longer backoff) at
    # a time.
    # Five leases, not three: on a loaded 2-core CI machine the reconnection alone has
    # been measured at 3.0 s; the promise under test is recovery without manual help.
    assert took <= 5 * LEASE, (
        f"the worker needed {took:.1f}s after the restart to complete a job; log tail:\n"
        + (tmp_path / "rw.log").read_text()[-3000:]
    )


async def test_worker_log_stays_json_when_its_connections_are_cut(
    fault_db: RestartableDb, tmp_path: Path
) -> None:
    url, _ = fault_db
    log = tmp_path / "cw.log"
    async with worker_process(url, "cw", log) as proc:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            assert await terminate_backends(conn, "cw") > 0
        job_id = await _enqueue_noop(url)
        await wait_for(lambda: _completed(url, job_id), timeout=15, what="a job after the cut")
        assert proc.poll() is None
    assert proc.returncode == 0
    lines = log.read_text().splitlines()
    assert any('"event": "completed"' in line for line in lines)
    plain = []
    for line in lines:
        try:
            assert isinstance(json.loads(line), dict)
        except (json.JSONDecodeError, AssertionError):
            plain.append(line)
    assert not plain, f"{len(plain)} log lines are not JSON objects, e.g. {plain[:3]}"
