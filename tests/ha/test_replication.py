"""What the replication mode promises a queue across a failover (the README's "High
availability" section quotes these runs).

Asynchronous: the primary acknowledges a commit before the standby has it, so a failover
while the standby lags loses acknowledged enqueues and completions (a lost completion
means the job runs again on the new primary). Synchronous: nothing acknowledged is lost,
because every commit waits until the standby has it, which is also its cost.

The lag is made by stopping the primary's WAL sender (SIGSTOP), as a stalled network
would; the primary is then killed and the standby promoted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import psycopg

from tests.ha.cluster import Cluster, Fault, failover
from tests.ha.watch import TimedEvents, job_rows, wait_until
from tests.harness import run_workers

LAG_SECONDS = 2.0
SETTINGS = {"lease_seconds": 2.0, "poll_seconds": 0.5, "heartbeat_seconds": 0.5,
            "concurrency": 4}


async def _feed(url: str, acknowledged: list[int], stop: asyncio.Event) -> None:
    """One job per commit, every 20 ms, until `stop`; each id kept once its commit returned."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True,
                                                     connect_timeout=2) as conn:
        while not stop.is_set():
            cur = await conn.execute(
                "INSERT INTO taskboard_jobs (kind, payload)"
                " VALUES ('sleep', '{\"seconds\": 0.05}') RETURNING id"
            )
            row = await cur.fetchone()
            assert row is not None
            acknowledged.append(int(row[0]))
            await asyncio.sleep(0.02)


async def _lagging_failover(cluster: Cluster) -> tuple[list[int], set[int], TimedEvents]:
    """Workers and a feeder run; the standby stops receiving for `LAG_SECONDS`; the primary
    is killed and the standby promoted. Returns the acknowledged enqueues, the jobs whose
    completion was acknowledged before the failover, and the workers' events."""
    events = TimedEvents()
    acknowledged: list[int] = []
    stop = asyncio.Event()
    async with run_workers(cluster.url, "rep-a", "rep-b", recorder=events, **SETTINGS):
        feeder = asyncio.create_task(_feed(cluster.url, acknowledged, stop))
        await wait_until(lambda: len(events.completions()) >= 5, timeout=20,
                         what="work under way")
        cluster.primary.pause_replication()
        await asyncio.sleep(LAG_SECONDS)
        done = await failover(cluster, Fault.KILL)
        stop.set()
        with contextlib.suppress(psycopg.Error, OSError):
            await feeder
        completed_before = {job for t, job in _completed_at(events) if t < done.at}
        print(f"\nWAL the standby had not received at the promotion: {done.wal_behind} bytes")
        await wait_until(lambda: _settled(cluster.standby.url()), timeout=30,
                         what="the new primary's jobs to complete")
    return acknowledged, completed_before, events


def _completed_at(events: TimedEvents) -> list[tuple[float, int]]:
    from taskboard.core.engine.events import Completed

    return [(t, e.job_id) for t, e in events.of(Completed)]


async def _settled(url: str) -> bool:
    rows = await job_rows(url)
    return bool(rows) and all(done for done, _ in rows.values())


async def test_asynchronous_replication_loses_acknowledged_enqueues_and_completions(
    cluster: Cluster,
) -> None:
    acknowledged, completed_before, _ = await _lagging_failover(cluster)
    rows = await job_rows(cluster.standby.url())
    lost_enqueues = [j for j in acknowledged if j not in rows]
    lost_completions = [j for j in completed_before if j in rows and rows[j][1] > 1]
    print(
        f"\nasync, {LAG_SECONDS:g} s lag: {len(acknowledged)} enqueues acknowledged, "
        f"{len(lost_enqueues)} lost; {len(completed_before)} completions acknowledged, "
        f"{len(lost_completions)} lost (run again on the new primary)"
    )
    assert lost_enqueues, "a lagging asynchronous standby kept every acknowledged enqueue?"
    # What the queue itself promises still holds on the new primary: no job is stuck.
    assert all(done for done, _ in rows.values())


async def test_synchronous_replication_loses_nothing_acknowledged_and_every_commit_waits(
    cluster: Cluster,
) -> None:
    async def commit_seconds(count: int) -> float:
        async with await psycopg.AsyncConnection.connect(cluster.url, autocommit=True) as c:
            began = time.monotonic()
            for _ in range(count):
                await c.execute("INSERT INTO taskboard_jobs (kind) VALUES ('noop')")
            return (time.monotonic() - began) / count

    asynchronous = await commit_seconds(200)
    cluster.primary.set_synchronous("*")
    synchronous = await commit_seconds(200)
    print(f"\ncommit on loopback: async {asynchronous * 1000:.2f} ms, "
          f"sync {synchronous * 1000:.2f} ms")
    # With the standby stalled, a synchronous commit does not return at all.
    cluster.primary.pause_replication()
    try:
        stalled = asyncio.create_task(commit_seconds(1))
        done, _ = await asyncio.wait({stalled}, timeout=1.0)
        assert not done, "a synchronous commit returned while the standby received nothing"
    finally:
        cluster.primary.resume_replication()
    assert await asyncio.wait_for(stalled, 10) < 10

    # The same stall, then a failover: nothing acknowledged is lost.
    acknowledged, completed_before, _ = await _lagging_failover(cluster)
    rows = await job_rows(cluster.standby.url())
    lost_enqueues = [j for j in acknowledged if j not in rows]
    runs_again = [j for j in completed_before if rows[j][1] > 1]
    print(
        f"\nsync, {LAG_SECONDS:g} s stall: {len(acknowledged)} enqueues acknowledged, "
        f"{len(lost_enqueues)} lost; {len(completed_before)} completions acknowledged, "
        f"{len(runs_again)} run again"
    )
    assert not lost_enqueues
    assert not runs_again
