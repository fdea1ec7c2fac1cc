"""Workers follow a failover: a primary killed, frozen or turned read-only, the standby
promoted, and the workers, on a URL that lists both hosts with
`target_session_attrs=read-write`, carry on against the new primary.

Replication is synchronous in these tests (`synchronous_standby_names = '*'`), so that an
acknowledged completion is on the standby when it is promoted: what the queue does is then
seen apart from what asynchronous replication may lose (test_replication.py measures that).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import psycopg
from taskboard.core.engine.events import LeftReadOnlyServer

from tests.faults.harness import spawn_worker
from tests.ha.cluster import Cluster, Fault, failover
from tests.ha.watch import TimedEvents, enqueue_sleeps, job_rows, wait_until
from tests.harness import run_workers

LEASE = 2.0
CONNECT_TIMEOUT = 2.0  # in the cluster's URL (tests/ha/conftest.py)
# A loaded machine (two cores, several suites at once) adds scheduling delay to every step.
SLACK = 1.5
WORKERS = ("ha-a", "ha-b")
SETTINGS = {"lease_seconds": LEASE, "poll_seconds": 0.5, "heartbeat_seconds": 0.5,
            "concurrency": 4}


async def _all_completed(url: str, expected: int) -> bool:
    rows = await job_rows(url)
    return len(rows) == expected and all(done for done, _ in rows.values())


async def _fail_over_with_work_in_flight(cluster: Cluster, fault: Fault) -> None:
    """Two workers busy on the primary; `fault` and a promotion; then every job, old and
    new, completes on the new primary, none twice, and each worker claims again within a
    lease of the fault."""
    cluster.primary.set_synchronous("*")
    events = TimedEvents()
    before = await enqueue_sleeps(cluster.url, 24, 0.3)
    async with run_workers(cluster.url, *WORKERS, recorder=events, **SETTINGS):
        await wait_until(lambda: len(events.completions()) >= 4, timeout=20,
                         what="work under way on the primary")
        at = (await failover(cluster, fault)).at
        new_primary = cluster.standby.url()
        after = await enqueue_sleeps(new_primary, 8, 0.1)
        await wait_until(lambda: _all_completed(new_primary, len(before) + len(after)),
                         timeout=30, what="every job completed on the new primary")
        for worker in WORKERS:
            resumed = events.first_claim_after(worker, at)
            assert resumed is not None, f"{worker} never claimed on the new primary"
            assert resumed - at <= LEASE + SLACK, (
                f"{worker} claimed again {resumed - at:.1f} s after the {fault}"
            )
        if fault is Fault.READ_ONLY:
            # Each worker says once that it left (the metrics count it), not once per retry.
            left = [e.worker_id for _, e in events.of(LeftReadOnlyServer)]
            assert sorted(set(left)) == sorted(WORKERS), left
            # The move is written down where an operator looks afterwards.
            async def noted() -> bool:
                async with await psycopg.AsyncConnection.connect(new_primary) as conn:
                    cur = await conn.execute(
                        "SELECT count(*) FROM taskboard_workers WHERE id = ANY(%s)"
                        " AND last_error LIKE '%%(left the read-only server)'", (list(WORKERS),)
                    )
                    row = await cur.fetchone()
                    return row is not None and row[0] == len(WORKERS)

            await wait_until(noted, timeout=10, what="the workers' rows to note the move")
    twice = {job: n for job, n in events.completions().items() if n > 1}
    assert not twice, f"jobs completed more than once: {twice}"


async def test_killed_primary_workers_resume_on_the_promoted_standby_within_a_lease(
    cluster: Cluster,
) -> None:
    await _fail_over_with_work_in_flight(cluster, Fault.KILL)
    # The old primary comes back only as a standby, rebuilt from the new primary.
    killed = cluster.primary.port
    await asyncio.to_thread(cluster.rejoin_old_primary)
    assert cluster.standby.port == killed
    await enqueue_sleeps(cluster.url, 1, 0)
    await asyncio.to_thread(cluster.wait_replayed)
    rows = await job_rows(cluster.standby.url())
    assert len(rows) == 24 + 8 + 1


async def test_read_only_primary_workers_move_to_the_writable_server_within_a_lease(
    cluster: Cluster,
) -> None:
    # The old primary keeps its connections and answers, but refuses every write: a worker
    # that waited it out, as before, never claimed again.
    await _fail_over_with_work_in_flight(cluster, Fault.READ_ONLY)


async def test_frozen_primary_new_jobs_complete_within_connect_timeout_plus_a_lease(
    cluster: Cluster,
) -> None:
    events = TimedEvents()
    before = await enqueue_sleeps(cluster.url, 12, 0.3)
    async with run_workers(cluster.url, *WORKERS, recorder=events, **SETTINGS):
        await wait_until(lambda: len(events.completions()) >= 4, timeout=20,
                         what="work under way on the primary")
        await failover(cluster, Fault.FREEZE)
        new_primary = cluster.standby.url()
        after = await enqueue_sleeps(new_primary, 8, 0.1)
        enqueued = time.monotonic()

        async def new_jobs_done() -> bool:
            rows = await job_rows(new_primary)
            return all(rows[j][0] for j in after)

        done = await wait_until(new_jobs_done, timeout=60, what="the new jobs to complete")
        print(f"\nnew jobs completed {done - enqueued:.1f} s after their enqueue")
        assert done - enqueued <= CONNECT_TIMEOUT + LEASE + SLACK, (
            f"new jobs completed {done - enqueued:.1f} s after they were enqueued"
        )
        rows = await job_rows(new_primary)
        retried = {j: rows[j][1] for j in after if rows[j][1] != 1}
        assert not retried, f"new jobs that needed more than one attempt: {retried}"
        await wait_until(lambda: _all_completed(new_primary, len(before) + len(after)),
                         timeout=30, what="the frozen primary's jobs reclaimed and completed")


def test_the_roles_that_prove_a_writable_server_are_real_roles() -> None:
    # The supervisor names them as strings; a renamed role would never end a streak.
    from taskboard.core.engine.completer import COMPLETIONS
    from taskboard.core.engine.controller import CONTROL
    from taskboard.core.engine.producer import CLAIMS
    from taskboard.core.engine.supervisor import WRITING_ROLES

    assert {CLAIMS, CONTROL, COMPLETIONS} == WRITING_ROLES


async def test_a_worker_process_with_no_writable_server_exits_4(
    cluster: Cluster, tmp_path: Path
) -> None:
    # The primary turns read-only and nothing is promoted: neither host of the URL takes
    # writes. Before, the worker waited it out for ever, a warning per retry.
    log = tmp_path / "worker.log"
    proc = spawn_worker(cluster.url, "ha-proc", log, lease=LEASE, drain_timeout=1.0)
    try:
        async def running() -> bool:
            async with await psycopg.AsyncConnection.connect(cluster.url, autocommit=True) as c:
                cur = await c.execute(
                    "SELECT 1 FROM taskboard_workers WHERE id = 'ha-proc' AND state = 'running'"
                )
                return await cur.fetchone() is not None

        await wait_until(running, timeout=30, what="the worker to register")
        await asyncio.to_thread(cluster.primary.make_read_only)
        at = time.monotonic()
        code = await asyncio.to_thread(proc.wait, LEASE * 4 + 20)
        waited = time.monotonic() - at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert code == 4, log.read_text()[-2000:]
    assert waited >= LEASE * 0.9
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert any(line.get("msg") == "no writable server" for line in lines)
    warnings = [line for line in lines if line.get("level") == "warning"
                and line.get("logger") == "taskboard.worker"]
    # A first line per role that meets it, then one a second.
    assert len(warnings) <= waited + 6, warnings
