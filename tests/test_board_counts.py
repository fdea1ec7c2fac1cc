"""The board's counts kept by triggers (migrations 3, 5 and 6) say what a full scan of the jobs
says, through real workers, the library's operator calls, arbitrary writes and the
migrations themselves; and the board's reads no longer visit waiting rows or old trouble
attempts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from taskboard.core import sql
from taskboard.core.base.errors import TaskboardError
from taskboard.core.engine.events import Completed, Dead
from taskboard.core.engine.schema import MIGRATIONS, SCHEMA_VERSION, migrate
from taskboard.core.kinds import JobContext, JobKind, builtin_registry
from taskboard.core.operations import retention
from taskboard.core.operations.queues import pause_queue
from taskboard.core.queue.jobs import NewJob, cancel, enqueue, enqueue_many, retry
from taskboard.core.view.status import GONE_AFTER_SECONDS, read_board

from tests.conftest import _with_dbname, wait_for
from tests.count_oracles import KEPT_FINISHED, SCANNED_FINISHED, WAITING, count_mismatches
from tests.count_oracles import rows as _rows
from tests.harness import Recorder, run_workers

CLAIM_ONE = ("UPDATE taskboard_jobs SET lease_token = gen_random_uuid(),"
             " lease_expires_at = now() + interval '1 minute' WHERE id = %(id)s")

# The statements as they were before migration 5, scanning the waiting rows: the oracles.
SCANNED_PENDING = f"""
SELECT count(*) FILTER (WHERE run_at <= now()), count(*) FILTER (WHERE run_at > now())
  FROM taskboard_jobs WHERE {WAITING}"""
SCANNED_ORPHANS = f"""
SELECT j.kind, j.queue, count(*) AS waiting
  FROM taskboard_jobs j
 WHERE {WAITING}
   AND NOT EXISTS (
       SELECT 1 FROM taskboard_workers w
        WHERE w.stopped_at IS NULL
          AND w.heartbeat_at > now() - make_interval(secs => %(gone_after)s)
          AND j.kind = ANY (w.kinds) AND j.queue = ANY (w.queues))
 GROUP BY j.kind, j.queue
 ORDER BY j.kind, j.queue"""
SCANNED_BY_QUEUE = """
SELECT queue, state, sum(n)::bigint AS n FROM (
    SELECT queue,
           CASE WHEN lease_token IS NOT NULL THEN 'running'
                WHEN run_at <= now() THEN 'pending' ELSE 'scheduled' END AS state,
           1 AS n
      FROM taskboard_jobs
     WHERE completed_at IS NULL AND failed_at IS NULL AND cancelled_at IS NULL
    UNION ALL
    SELECT queue, state, n FROM taskboard_finished_counts
) s
 GROUP BY queue, state
 ORDER BY queue, state"""


async def assert_counts_match_a_scan(conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
    """Every number the board reads from the kept counts against the same number scanned."""
    assert await count_mismatches(conn) == []
    board = await read_board(conn, database="t", mode="attached")
    [(pending, scheduled)] = await _rows(conn, SCANNED_PENDING)
    assert (board.counts.pending, board.counts.scheduled) == (pending, scheduled)
    gone = {"gone_after": GONE_AFTER_SECONDS}
    # (kind, queue, waiting); the fourth column, whether the queue is worked, is checked in
    # tests/test_no_worker.py.
    orphans = [row[:3] for row in await _rows(conn, sql.ORPHAN_KINDS, gone)]
    assert orphans == await _rows(conn, SCANNED_ORPHANS, gone)
    assert [(o.kind, o.queue, o.waiting) for o in board.orphans] == await _rows(
        conn, SCANNED_ORPHANS, gone)
    assert await _rows(conn, sql.JOB_COUNTS_BY_QUEUE) == await _rows(conn, SCANNED_BY_QUEUE)
    assert [(q.name, q.paused_at, q.reason, q.waiting) for q in board.paused_queues] == (
        await _rows(conn, sql.LIST_QUEUES))
    return {"pending": pending, "scheduled": scheduled}


# --- through the workers and the operator's calls -----------------------------------------


async def test_waiting_counts_match_a_scan_through_workers_and_operator_calls(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    registry = builtin_registry()
    snoozed: set[int] = set()
    hung: set[int] = set()

    async def explode(ctx: JobContext) -> None:
        raise RuntimeError("no")

    async def later(ctx: JobContext) -> None:
        if ctx.job_id not in snoozed:
            snoozed.add(ctx.job_id)
            ctx.snooze(0.2)

    async def hang_once(ctx: JobContext) -> None:
        if ctx.job_id not in hung:
            hung.add(ctx.job_id)
            await asyncio.sleep(3600)

    registry.register(JobKind("explode", lambda p: dict(p), explode))
    registry.register(JobKind("later", lambda p: dict(p), later))
    rec = Recorder()
    soon = NewJob("noop", run_at=None)
    jobs = [soon] * 30 + [NewJob("noop", queue="mail")] * 10 + [
        NewJob("explode", max_attempts=2)] * 3 + [NewJob("later")] * 2
    async with run_workers(db_url, "w1", recorder=rec, registry=registry, lease_seconds=5,
                           retry_base_seconds=0.05, queues=("default", "mail")):
        ids = await enqueue_many(conn, registry, jobs)
        await wait_for(lambda: len(rec.of(Completed)) == 42 and len(rec.of(Dead)) == 3,
                       timeout=30, what="noops, snoozed jobs and dead ones done")
    dead = [e.job_id for e in rec.of(Dead)]
    await assert_counts_match_a_scan(conn)

    # Scheduled jobs, a cancel of one, a retry of a dead job, a paused queue filling up.
    later_on = await conn.execute("SELECT now() + interval '1 hour'")
    run_at = (await later_on.fetchone())[0]
    scheduled = await enqueue_many(conn, registry, [NewJob("noop", run_at=run_at)] * 4)
    await cancel(conn, scheduled[0])
    await retry(conn, dead[0])
    await pause_queue(conn, "mail", "SMTP provider down")
    await enqueue_many(conn, registry, [NewJob("noop", queue="mail")] * 3)
    counts = await assert_counts_match_a_scan(conn)
    assert counts == {"pending": 4, "scheduled": 3}  # the retried job and 3 in mail

    # A worker that dies holding jobs; another takes them over once the leases expire.
    hangs = builtin_registry()
    hangs.register(JobKind("hang_once", lambda p: dict(p), hang_once))
    held = await enqueue_many(conn, hangs, [NewJob("hang_once")] * 2)
    async with run_workers(db_url, "w2", registry=hangs, lease_seconds=1) as [w2]:
        await wait_for(lambda: len(hung) == 2, what="both hang_once jobs running")
        await w2.crash()
    await assert_counts_match_a_scan(conn)
    async with run_workers(db_url, "w3", recorder=rec, registry=hangs, lease_seconds=5):
        await wait_for(lambda: all(rec.of(Completed, job_id=i) for i in held), timeout=20,
                       what="the expired leases reclaimed and completed")
    await assert_counts_match_a_scan(conn)

    # Pruning, and the owner's own writes: a waiting row deleted, one moved to a queue.
    await conn.execute("UPDATE taskboard_jobs SET completed_at = now() - interval '2 days'"
                       " WHERE id = ANY(%s)", (ids[:10],))
    pruned = await retention.prune(conn, retention.Retention())
    assert pruned.jobs == 10
    await conn.execute("DELETE FROM taskboard_jobs WHERE id = %s", (scheduled[1],))
    await conn.execute("UPDATE taskboard_jobs SET queue = 'other', kind = 'email'"
                       " WHERE id = %s", (scheduled[2],))
    await assert_counts_match_a_scan(conn)


# --- several workers at once, and transactions that stay open ----------------------------


async def test_waiting_counts_stay_right_under_concurrent_workers_and_producers(
    db_url: str, conn: psycopg.AsyncConnection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Three workers claim from one queue and kind at once while a producer enqueues and an
    operator cancels; some jobs fail and are retried, some snooze, and handlers that write
    enqueue a follow-up inside their own (held) transaction. No update is lost, no
    statement waits long on a counter or deadlocks, and the slots stay few."""
    caplog.set_level(logging.WARNING, logger="taskboard")
    registry = builtin_registry()
    failed: set[int] = set()
    snoozed: set[int] = set()

    async def flaky(ctx: JobContext) -> None:
        if ctx.job_id not in failed:
            failed.add(ctx.job_id)
            raise RuntimeError("first try fails")

    async def later(ctx: JobContext) -> None:
        if ctx.job_id not in snoozed:
            snoozed.add(ctx.job_id)
            ctx.snooze(0.1)

    async def spawn(ctx: JobContext) -> None:  # enqueues, then holds its transaction a while
        await enqueue(ctx.conn, registry, "noop")
        await asyncio.sleep(0.3)

    registry.register(JobKind("flaky", lambda p: dict(p), flaky))
    registry.register(JobKind("later", lambda p: dict(p), later))
    registry.register(JobKind("spawn", lambda p: dict(p), spawn, writes_db=True))
    rec = Recorder()
    first = [NewJob("noop")] * 300 + [NewJob("flaky")] * 30 + [NewJob("later")] * 20 + [
        NewJob("spawn")] * 10

    async def produce() -> None:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as c:
            for _ in range(10):
                await enqueue_many(c, registry, [NewJob("noop")] * 20)
                await asyncio.sleep(0.02)

    async def cancel_some() -> int:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as c:
            ids = await enqueue_many(c, registry, [NewJob("noop", run_at=None)] * 10)
            done = 0
            for job_id in ids:
                try:
                    await cancel(c, job_id)
                    done += 1
                except TaskboardError:
                    pass  # a worker finished it first
            return done

    async with run_workers(db_url, "w1", "w2", "w3", recorder=rec, registry=registry,
                           lease_seconds=5, retry_base_seconds=0.05):
        await enqueue_many(conn, registry, first)
        _, cancelled = await asyncio.gather(produce(), cancel_some())
        total = len(first) + 200 + 10 + 10  # the follow-ups of spawn
        await wait_for(lambda: len(rec.of(Completed)) + cancelled == total, timeout=40,
                       what="every job done or cancelled")
    await assert_counts_match_a_scan(conn)
    assert await _rows(conn, "SELECT sum(n)::bigint FROM taskboard_waiting_counts") == [(0,)]
    # A pair takes a new slot only while all of its slots are held: no more than its
    # writers at once (10 spawn handlers, 3 claimers, the producer, the canceller, this
    # test), where a row per statement would have hundreds.
    slots = await _rows(conn, "SELECT max(count(*)) OVER () FROM taskboard_waiting_counts"
                              " GROUP BY queue, kind LIMIT 1")
    assert slots[0][0] <= 16, slots
    trouble = [r.getMessage() for r in caplog.records if r.name.startswith("taskboard")
               and r.levelno >= logging.WARNING]
    assert not trouble, trouble[:5]


async def test_an_open_transaction_that_enqueued_holds_up_no_other_writer(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    """An application's transaction enqueues and stays open: every other session still
    enqueues, claims and cancels that kind at once (a counter row shared by backend would
    make some of them wait for its commit), and a worker runs the rest meanwhile."""
    registry = builtin_registry()
    holder = await psycopg.AsyncConnection.connect(db_url)
    sessions: list[psycopg.AsyncConnection[Any]] = []
    try:
        await enqueue(holder, registry, "noop")  # psycopg opened a transaction: held
        for _ in range(24):
            s = await psycopg.AsyncConnection.connect(db_url, autocommit=True)
            sessions.append(s)
            await s.execute("SET lock_timeout = '1s'")
            [job_id] = await enqueue_many(s, registry, [NewJob("noop")])
            await s.execute(CLAIM_ONE, {"id": job_id})
            await s.execute("UPDATE taskboard_jobs SET lease_token = NULL,"
                            " lease_expires_at = NULL WHERE id = %s", (job_id,))
            await cancel(s, job_id)
        rec = Recorder()
        async with run_workers(db_url, "w1", recorder=rec, lease_seconds=5):
            await enqueue_many(conn, registry, [NewJob("noop")] * 50)
            await wait_for(lambda: len(rec.of(Completed)) == 50, timeout=10,
                           what="the worker's 50 jobs done while the transaction is open")
        await holder.commit()
    finally:
        await holder.close()
        for s in sessions:
            await s.close()
    await assert_counts_match_a_scan(conn)
    assert await _rows(conn, "SELECT sum(n)::bigint FROM taskboard_waiting_counts") == [(1,)]


# --- any write, from several sessions at once ----------------------------------------------


def _random_write(rng: random.Random, mine: int) -> tuple[str, dict[str, Any]]:
    """One statement of the kind that moves jobs between states, on a few random rows of
    those this session owns (id % 3), so sessions meet only on the counters."""
    limit = rng.randint(1, 6)
    choice = rng.randrange(9)
    queue, kind = rng.choice(["default", "mail", "x"]), rng.choice(["noop", "email", "odd"])
    params = {"queue": queue, "kind": kind, "n": rng.randint(1, 8)}
    if choice == 0:  # enqueue, due now or later
        later = rng.choice(["0", "3600"])
        return ("INSERT INTO taskboard_jobs (queue, kind, run_at) SELECT %(queue)s, %(kind)s,"
                f" now() + interval '{later} seconds' FROM generate_series(1, %(n)s)", params)
    if choice == 1:  # rows that arrive finished (an import)
        column = rng.choice(["completed_at", "failed_at", "cancelled_at"])
        return (f"INSERT INTO taskboard_jobs (queue, kind, {column}) SELECT %(queue)s,"
                " %(kind)s, now() FROM generate_series(1, %(n)s)", params)
    statements = {
        2: ("UPDATE taskboard_jobs SET lease_token = gen_random_uuid(),"
            " lease_expires_at = now() + interval '1 minute'", WAITING),  # claim
        3: ("UPDATE taskboard_jobs SET lease_token = NULL, lease_expires_at = NULL",
            "lease_token IS NOT NULL"),  # release
        4: ("UPDATE taskboard_jobs SET lease_token = NULL, lease_expires_at = NULL,"
            " completed_at = now()", "lease_token IS NOT NULL"),  # complete
        5: ("UPDATE taskboard_jobs SET cancelled_at = now(), lease_token = NULL,"
            " lease_expires_at = NULL", "completed_at IS NULL AND failed_at IS NULL"),
        6: ("UPDATE taskboard_jobs SET failed_at = NULL, cancelled_at = NULL,"
            " completed_at = NULL", "lease_token IS NULL"),  # retry
        7: ("DELETE FROM taskboard_jobs", "true"),
        8: ("UPDATE taskboard_jobs SET queue = %(queue)s, kind = %(kind)s", "true"),
    }
    head, where = statements[choice]
    pick = (f"SELECT id FROM taskboard_jobs WHERE id %% 3 = {mine} AND ({where})"
            f" ORDER BY random() LIMIT {limit}")
    return f"{head} WHERE id IN ({pick})", params


async def test_waiting_counts_match_a_scan_after_random_writes_from_concurrent_sessions(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    """Three sessions write at once (on the same counters), some in transactions that roll
    back; each write moves a few rows between any two states. Runs with a fixed seed."""
    rng = random.Random(11)

    async def session(mine: int, seed: int) -> None:
        local = random.Random(seed)
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as c:
            for _ in range(120):
                statement, params = _random_write(local, mine)
                if local.random() < 0.2:
                    async with c.transaction(force_rollback=True):
                        await c.execute(statement, params)
                else:
                    try:
                        await c.execute(statement, params)
                    except psycopg.errors.CheckViolation:
                        pass  # a retry of a leased row, say: refused, nothing counted

    await asyncio.gather(*(session(i, rng.randrange(10**6)) for i in range(3)))
    await conn.execute("INSERT INTO taskboard_workers (id, host, pid, lease_seconds, capacity,"
                       " kinds, queues) VALUES ('w', 'h', 1, 60, 8, '{noop}', '{default,x}')")
    await pause_queue(conn, "mail", None)
    await assert_counts_match_a_scan(conn)
    cur = await conn.execute(f"SELECT count(*) FROM taskboard_jobs WHERE {WAITING}")
    assert (await cur.fetchone())[0] > 0  # the mix left some waiting, or it proves little


# --- the migration counts what is already there ------------------------------------------


@contextlib.asynccontextmanager
async def _database_at(pg_server_url: str, version: int) -> AsyncIterator[Any]:
    """A connection to a new database migrated up to `version` only (dropped after)."""
    name = f"tb_m{version + 1}_{random.randrange(16**8):08x}"
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        url = _with_dbname(pg_server_url, name)
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(sql.CREATE_SCHEMA_TABLE)
            for number, text in enumerate(MIGRATIONS[:version], start=1):
                await conn.execute(text.encode())
                await conn.execute(sql.RECORD_MIGRATION, {"v": number})
            yield conn
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_migration_5_counts_the_jobs_already_waiting(pg_server_url: str) -> None:
    async with _database_at(pg_server_url, 4) as conn:
        await conn.execute(
            "INSERT INTO taskboard_jobs (kind, queue, run_at, lease_token, lease_expires_at,"
            " completed_at) VALUES ('noop', 'default', now(), NULL, NULL, NULL),"
            " ('noop', 'default', now() + interval '1 hour', NULL, NULL, NULL),"
            " ('email', 'mail', now(), NULL, NULL, NULL),"
            " ('email', 'mail', now(), gen_random_uuid(), now() + interval '1 minute', NULL),"
            " ('noop', 'default', now(), NULL, NULL, now())"
        )
        assert SCHEMA_VERSION >= 5 and await migrate(conn) == SCHEMA_VERSION
        await assert_counts_match_a_scan(conn)
        kept = await _rows(conn, "SELECT queue, kind, n FROM taskboard_waiting_counts"
                                 " ORDER BY 1, 2")
        assert kept == [("default", "noop", 2), ("mail", "email", 1)]


async def test_migration_6_recounts_finished_jobs_the_paired_trigger_left_in_another_queue(
    pg_server_url: str,
) -> None:
    """Migration 3's trigger counted a finished row moved to another queue in neither; 6
    counts it where it is, and its trigger keeps doing so."""
    async with _database_at(pg_server_url, 5) as conn:
        await conn.execute(
            "INSERT INTO taskboard_jobs (kind, queue, completed_at, failed_at) VALUES"
            " ('noop', 'default', now(), NULL), ('noop', 'default', now(), NULL),"
            " ('email', 'mail', NULL, now())")
        moved = ("UPDATE taskboard_jobs SET queue = %s WHERE id ="
                 " (SELECT min(id) FROM taskboard_jobs WHERE queue = 'default')")
        await conn.execute(moved, ("other",))
        assert await _rows(conn, KEPT_FINISHED) != await _rows(conn, SCANNED_FINISHED)
        assert SCHEMA_VERSION >= 6 and await migrate(conn) == SCHEMA_VERSION
        assert await _rows(conn, KEPT_FINISHED) == [
            ("default", "completed", 1), ("mail", "dead", 1), ("other", "completed", 1)]
        await conn.execute(moved, ("elsewhere",))
        await assert_counts_match_a_scan(conn)
        assert await _rows(conn, KEPT_FINISHED) == [
            ("elsewhere", "completed", 1), ("mail", "dead", 1), ("other", "completed", 1)]


# --- orphans ---------------------------------------------------------------------------------


async def test_orphans_are_the_kinds_no_live_worker_runs_in_that_queue(
    conn: psycopg.AsyncConnection[Any]
) -> None:
    await conn.execute(
        "INSERT INTO taskboard_jobs (kind, queue, run_at) VALUES"
        " ('email', 'default', now()), ('email', 'default', now() + interval '1 hour'),"
        " ('email', 'mail', now()), ('resize', 'default', now())"
    )
    await conn.execute(  # a claimed job waits for nobody
        "INSERT INTO taskboard_jobs (kind, queue, lease_token, lease_expires_at)"
        " VALUES ('resize', 'default', gen_random_uuid(), now() + interval '1 minute')"
    )

    async def orphans() -> list[tuple[str, str, int]]:
        board = await read_board(conn, database="t", mode="attached")
        return [(o.kind, o.queue, o.waiting) for o in board.orphans]

    assert await orphans() == [("email", "default", 2), ("email", "mail", 1),
                               ("resize", "default", 1)]
    worker = ("INSERT INTO taskboard_workers (id, host, pid, lease_seconds, capacity, kinds,"
              " queues, heartbeat_at, stopped_at) VALUES (%s, 'h', 1, 60, 8, %s, %s, %s, %s)")
    stale = timedelta(seconds=GONE_AFTER_SECONDS + 5)
    now = (await (await conn.execute("SELECT now()")).fetchone())[0]
    await conn.execute(worker, ("gone", ["email", "resize"], ["default", "mail"],
                                now - stale, None))
    await conn.execute(worker, ("stopped", ["email", "resize"], ["default", "mail"], now, now))
    await conn.execute(worker, ("other-queue", ["email"], ["mail"], now, None))
    assert await orphans() == [("email", "default", 2), ("resize", "default", 1)]
    await conn.execute(worker, ("live", ["email", "resize"], ["default"], now, None))
    assert await orphans() == []
    await assert_counts_match_a_scan(conn)


# --- plans: what the board's reads touch -----------------------------------------------------


async def _explain(conn: psycopg.AsyncConnection[Any], query: str, params: Any) -> dict[str, Any]:
    cur = await conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query, params)
    row = await cur.fetchone()
    assert row is not None
    plan: dict[str, Any] = row[0][0]["Plan"]
    return plan


async def test_the_boards_counts_read_no_waiting_row(conn: psycopg.AsyncConnection[Any]) -> None:
    """With 20,000 jobs waiting, the counts and the orphans read a handful of blocks: the
    kept counts and, for jobs due later, the ready index's few entries past now()."""
    await conn.execute("INSERT INTO taskboard_jobs (kind) SELECT 'noop'"
                       " FROM generate_series(1, 20000)")
    await conn.execute("ANALYZE taskboard_jobs")
    for name, params in (("JOB_COUNTS", None),
                         ("ORPHAN_KINDS", {"gone_after": GONE_AFTER_SECONDS}),
                         ("BOARD_PAUSED_QUEUES", None)):
        plan = await _explain(conn, getattr(sql, name), params)
        blocks = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
        assert blocks < 50 and "Seq Scan on taskboard_jobs" not in json.dumps(plan), (
            name, blocks)
    board = await read_board(conn, database="t", mode="attached")
    assert (board.counts.pending, board.counts.scheduled) == (20000, 0)


async def test_the_trouble_list_reads_only_the_rows_it_shows(
    conn: psycopg.AsyncConnection[Any]
) -> None:
    """2,000 lost leases in history: the dashboard's 50 come straight off the trouble index,
    newest first, without reading and sorting the rest."""
    await conn.execute(
        "WITH j AS (INSERT INTO taskboard_jobs (kind, completed_at)"
        "           SELECT 'noop', now() FROM generate_series(1, 2000) RETURNING id)"
        " INSERT INTO taskboard_attempts (job_id, attempt, lease_token, worker_id, claimed_at,"
        "                                 ended_at, outcome)"
        " SELECT id, 1, gen_random_uuid(), 'w', now() - id * interval '1 s',"
        "        now() - id * interval '1 s', 'lease_lost' FROM j"
    )
    await conn.execute("ANALYZE taskboard_attempts")
    plan = await _explain(conn, sql.LIST_TROUBLE, {"limit": 50})
    text = json.dumps(plan)
    assert "taskboard_attempts_trouble" in text and '"Sort"' not in text, text[:600]
    assert plan["Shared Hit Blocks"] + plan["Shared Read Blocks"] < 30
    board = await read_board(conn, database="t", mode="attached")
    newest = await _rows(conn, "SELECT job_id FROM taskboard_attempts ORDER BY ended_at DESC"
                               " LIMIT 50")
    assert [f.job_id for f in reversed(board.failures)] == [r[0] for r in newest]
