"""The dashboard's side of core, on a real PostgreSQL: the bounded board link and its health,
labels of workers started here, the demo's own database and its reset, trends."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import psycopg.sql
import pytest
from psycopg.conninfo import conninfo_to_dict
from taskboard.core.base.errors import ConfigError, DatabaseUnavailable
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.fleet import Fleet
from taskboard.core.fleet.link import BoardLink
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import enqueue
from taskboard.core.runtime.db import DEMO_DATABASE, Database, demo_database
from taskboard.core.view.control import CommandRefused

from tests.conftest import wait_for

LEASE = 2.0


@asynccontextmanager
async def fleet_on(url: str, workers: int = 2, **options: Any) -> AsyncIterator[Fleet]:
    fleet = Fleet(
        Database(url),
        None,
        builtin_registry(),
        settings=WorkerSettings(lease_seconds=LEASE, drain_seconds=0.5),
        name_prefix="t",
        **options,
    )
    await fleet.start(workers)
    try:
        yield fleet
    finally:
        await fleet.close()


async def test_a_backend_that_stops_answering_is_reported_within_the_limit_and_replaced(
    db_url: str,
) -> None:
    link = BoardLink(db_url, answer_timeout=1.0)
    pid = await link.run("pid", _backend_pid)
    assert link.health().last_answer_age is not None and link.health().last_error is None
    os.kill(pid, signal.SIGSTOP)  # this backend only: the server and everyone else go on
    try:
        waiting = asyncio.create_task(link.run("refreshing the board", _backend_pid))
        await asyncio.sleep(0.5)
        seen = link.health()
        assert seen.waiting_for == "refreshing the board" and seen.waiting_seconds >= 0.4
        started = asyncio.get_running_loop().time()
        with pytest.raises(DatabaseUnavailable, match="refreshing the board: no answer"):
            await waiting
        assert asyncio.get_running_loop().time() - started < 1.5
        after = link.health()
        assert after.waiting_for is None and "no answer" in (after.last_error or "")
        assert after.last_answer_age is not None and after.last_answer_age >= 1.0
    finally:
        os.kill(pid, signal.SIGCONT)
    # The next use opens a new connection (a new backend) and the link is healthy again.
    assert await link.run("pid", _backend_pid) != pid
    assert link.health().last_error is None
    await link.drop()


async def _backend_pid(conn: psycopg.AsyncConnection[Any]) -> int:
    cur = await conn.execute("SELECT pg_backend_pid()")
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_a_refresh_on_a_frozen_backend_keeps_the_last_board_and_says_why(
    db_url: str,
) -> None:
    async with fleet_on(db_url, workers=0, link=BoardLink(db_url, answer_timeout=1.0)) as fleet:
        first = await fleet.refresh()
        assert first.connected
        pid = await fleet.link.run("pid", _backend_pid)
        os.kill(pid, signal.SIGSTOP)
        try:
            stale = await asyncio.wait_for(fleet.refresh(), 5)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert not stale.connected and "no answer from the database" in (stale.error or "")
        assert stale.db_now == first.db_now  # the last good data, said to be old
        assert (await fleet.refresh()).connected


async def test_workers_started_here_stay_here_after_crash_and_drain_and_refuse_commands(
    db_url: str,
) -> None:
    async with fleet_on(db_url, workers=3) as fleet:
        a, b, c = sorted(fleet.embedded_worker_ids())
        await fleet.crash(a)
        await fleet.drain(b)
        await wait_for(lambda: fleet.embedded_worker_ids() == [c], what="a and b to stop")

        async def states() -> dict[str, tuple[str, bool]]:
            board = await fleet.refresh()
            return {w.id: (w.state, w.embedded) for w in board.workers}

        shown = await wait_for(
            lambda: _settled(states(), a, b), what="the board to show a and b stopped"
        )
        assert all(here for _, here in shown.values()), shown  # labelled "here", not remote
        for command in (fleet.pause, fleet.resume, fleet.drain, fleet.crash):
            with pytest.raises(CommandRefused, match=f"{a} has already stopped"):
                await command(a)


async def _settled(states: Any, *stopped: str) -> dict[str, tuple[str, bool]] | None:
    shown: dict[str, tuple[str, bool]] = await states
    if all(shown.get(w, ("", False))[0] in ("stopped", "gone") for w in stopped):
        return shown
    return None


async def test_reset_demo_empties_the_demo_database_and_starts_fresh_workers(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    async with fleet_on(db_url, workers=1) as fleet:
        with pytest.raises(CommandRefused, match="only the demo's own database"):
            await fleet.reset_demo()
    async with fleet_on(db_url, workers=2, mode="demo") as fleet:
        registry = builtin_registry()
        done = await enqueue(conn, registry, "noop")
        await enqueue(conn, registry, "noop", queue="nobody-works-here")
        await fleet.pause_queue("paused-for-the-story")
        await wait_for(lambda: _completed(conn, done), what="the noop job")
        await fleet.reset_demo()
        left = await _rows_left(conn)
        assert left == {}, f"rows left after the reset: {left}"
        board = await fleet.refresh()
        assert board.counts.completed == 0 and board.counts.pending == 0
        assert sorted(w.id for w in board.workers) == ["t-a", "t-b"]
        assert all(w.state == "running" for w in board.workers)
        # Job ids go on: no idempotency key of the first run is ever used again.
        assert await enqueue(conn, registry, "noop") > done


async def _completed(conn: psycopg.AsyncConnection[Any], job_id: int) -> bool:
    cur = await conn.execute("SELECT completed_at IS NOT NULL FROM taskboard_jobs WHERE id = %s",
                             (job_id,))
    row = await cur.fetchone()
    return bool(row and row[0])


# Tables of counts kept by triggers, and what each counts by besides the queue.
COUNTERS = {"taskboard_finished_counts": "state", "taskboard_waiting_counts": "kind"}


async def _rows_left(conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
    """Rows in every Taskboard table a story writes to (all but the schema's own,
    the installation id and the stand-ins registry), workers excepted: the reset starts
    new ones at once. A table added later is checked without changing this test."""
    cur = await conn.execute(
        "SELECT tablename FROM pg_tables WHERE tablename LIKE 'taskboard%%' AND tablename NOT IN"
        " ('taskboard_schema', 'taskboard_installation', 'taskboard_standins',"
        " 'taskboard_workers')"
    )
    left = {}
    for (table,) in await cur.fetchall():
        query = psycopg.sql.SQL("SELECT count(*) FROM {}").format(psycopg.sql.Identifier(table))
        if table in COUNTERS:  # a count in several rows (shards, slots) that sum to 0
            query = psycopg.sql.SQL(
                "SELECT count(*) FROM (SELECT FROM {} GROUP BY queue, {} HAVING sum(n) <> 0) c"
            ).format(psycopg.sql.Identifier(table), psycopg.sql.Identifier(COUNTERS[table]))
        row = await (await conn.execute(query)).fetchone()
        if row and row[0]:
            left[table] = row[0]
    return left


async def test_the_demo_gets_its_own_database_created_once(
    pg_server_url: str, db_url: str
) -> None:
    server = Database(db_url)
    demo = await demo_database(server)
    assert conninfo_to_dict(demo.url)["dbname"] == DEMO_DATABASE
    assert conninfo_to_dict(server.url).get("dbname") != DEMO_DATABASE
    again = await demo_database(server)  # exists now: used as it is
    assert again.url == demo.url
    assert await demo_database(demo) is demo


async def test_a_demo_database_that_cannot_be_created_is_one_clear_line(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    await conn.execute("DROP DATABASE IF EXISTS taskboard_demo")
    await conn.execute("DROP ROLE IF EXISTS tb_nocreate")
    await conn.execute("CREATE ROLE tb_nocreate LOGIN PASSWORD 's3cr3t-pw' NOCREATEDB")
    params = conninfo_to_dict(db_url)
    params.update(user="tb_nocreate", password="s3cr3t-pw")
    url = psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items()})
    try:
        with pytest.raises(ConfigError) as caught:
            await demo_database(Database(url))
        text = str(caught.value)
        assert "taskboard_demo could not be created" in text and "permission denied" in text
        assert "s3cr3t-pw" not in text and "\n" not in text
    finally:
        await conn.execute("DROP ROLE tb_nocreate")


async def test_trends_count_completions_and_each_lost_lease_once(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    async with fleet_on(db_url, workers=1) as fleet:
        await fleet.refresh()
        registry = builtin_registry()
        ids = [await enqueue(conn, registry, "noop") for _ in range(10)]
        await wait_for(lambda: _completed(conn, ids[-1]), what="ten noop jobs")
        await asyncio.sleep(0.2)
        trends = (await fleet.refresh()).trends
        assert sum(trends.completed_per_s) * trends.step >= 10
        assert len(trends.completed_per_s) == len(trends.lost) == len(trends.renewal_lateness)
        # A lost lease: the worker holding a sleep job is paused until another reclaims it.
        await fleet.add_worker()
        job = await enqueue(conn, registry, "sleep", {"seconds": 2 * LEASE})
        holder = await wait_for(lambda: _holder(fleet, job), what="the sleep job to be claimed")
        await fleet.pause(holder)
        await wait_for(lambda: _reclaimed(fleet, job, holder), timeout=3 * LEASE,
                       what="another worker to reclaim it")
        await fleet.resume(holder)
        await wait_for(lambda: _lost_total(fleet, 1), timeout=3 * LEASE, what="one lost lease")
        for _ in range(3):  # later refreshes see the same failure line: not counted again
            assert sum((await fleet.refresh()).trends.lost) == 1


async def _holder(fleet: Fleet, job: int) -> str | None:
    board = await fleet.refresh()
    return next((c.worker_id for c in board.claims if c.job_id == job), None)


async def _reclaimed(fleet: Fleet, job: int, holder: str) -> bool:
    board = await fleet.refresh()
    return any(c.job_id == job and c.reclaimed_from == holder for c in board.claims)


async def _lost_total(fleet: Fleet, n: int) -> bool:
    return sum((await fleet.refresh()).trends.lost) >= n
