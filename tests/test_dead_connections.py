"""Connections that die silently are noticed in seconds, and no attempt is burned by waiting
(DESIGN.md invariant 16; issue 22 item 5, issue 30 items 3 and 4).

Real workers and a real PostgreSQL, reached through tests/drop_proxy.py, whose flows can be
silenced without FIN or RST while new connections still work: what a NAT or firewall that
forgets its flows does.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool
from taskboard.core.base import libpq_settings
from taskboard.core.engine import worker_pool
from taskboard.core.engine.connection import RESET_SECONDS, HeldConnection, session_params
from taskboard.core.engine.db_errors import AnswerTimeout
from taskboard.core.engine.events import Completed, RenewalFailed
from taskboard.core.engine.flights import Phase
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker_pool import ConnectionCheck
from taskboard.core.fleet import FleetOptions, open_fleet
from taskboard.core.kinds import JobKind, builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue_many
from taskboard.core.runtime import db

from tests.conftest import wait_for
from tests.drop_proxy import DropProxy
from tests.harness import Recorder, RunningWorker, run_workers

LEASE = 4.0


async def _attempts(conn: Any, ids: list[int]) -> list[tuple[int, int, str | None]]:
    cur = await conn.execute(
        "SELECT job_id, attempt, outcome FROM taskboard_attempts"
        " WHERE job_id = ANY(%s) ORDER BY job_id, attempt",
        (ids,),
    )
    return await cur.fetchall()


async def _states(conn: Any, ids: list[int]) -> dict[int, tuple[str, int]]:
    cur = await conn.execute(
        "SELECT id, CASE WHEN completed_at IS NOT NULL THEN 'completed' ELSE 'not done' END,"
        " attempts FROM taskboard_jobs WHERE id = ANY(%s)",
        (ids,),
    )
    return {row[0]: (row[1], row[2]) for row in await cur.fetchall()}


@asynccontextmanager
async def _behind_proxy(
    db_url: str, *names: str, **options: Any
) -> AsyncIterator[tuple[DropProxy, list[RunningWorker]]]:
    """Workers `names` (`run_workers` options, the test's lease) whose every connection
    goes through a proxy that can drop its flows silently."""
    async with (
        DropProxy.for_url(db_url) as proxy,
        run_workers(proxy.url(db_url), *names, lease_seconds=LEASE, **options) as running,
    ):
        yield proxy, running


async def test_work_resumes_within_half_a_lease_plus_5s_after_every_flow_is_dropped(
    db_url: str, conn: Any
) -> None:
    registry = builtin_registry()
    rec = Recorder()
    async with _behind_proxy(db_url, "w1", "w2", recorder=rec) as (proxy, _):
        warm = await enqueue_many(conn, registry, [NewJob("noop") for _ in range(20)])
        await wait_for(lambda: len(rec.of(Completed)) >= len(warm), what="warm-up done")
        # Every pool connection of both workers is open and idle or held: all of them die.
        assert proxy.drop_flows() >= 4
        dropped = time.monotonic()
        ids = await enqueue_many(conn, registry, [NewJob("noop") for _ in range(10)])
        done = {e.job_id for e in rec.of(Completed)}
        await wait_for(
            lambda: set(ids) <= {e.job_id for e in rec.of(Completed)} | done,
            timeout=30, what="the jobs enqueued after the drop completed",
        )
        took = time.monotonic() - dropped
    assert took < LEASE / 2 + 5, f"work resumed {took:.1f} s after the drop"
    # Each job enqueued after the drop ran once: no attempt was burned on the way.
    assert await _states(conn, ids) == {i: ("completed", 1) for i in ids}
    assert await _attempts(conn, ids) == [(i, 1, "completed") for i in sorted(ids)]


async def test_a_claim_queued_behind_the_engine_lock_is_not_charged_for_the_wait(
    db_url: str, conn: Any
) -> None:
    """The local deadline starts when the claim is sent, not when it was queued: a claim
    that waited a whole lease for the engine connection still runs its job, in its first
    attempt. At 683562c the job was claimed already past its local deadline ("local lease
    deadline passed ...; not starting the handler") and its attempt was lost."""
    registry = builtin_registry()
    rec = Recorder()
    async with run_workers(db_url, "w1", recorder=rec, lease_seconds=LEASE) as (running,):
        engine = running.worker._crew.engine  # type: ignore[union-attr]
        async with engine.use("the test holds the engine connection", timeout=30):
            (job_id,) = await enqueue_many(conn, registry, [NewJob("noop")])
            # The producer heard the NOTIFY and waits for the engine lock.
            await asyncio.sleep(LEASE)
        await wait_for(lambda: rec.of(Completed, job_id=job_id), what="the job completed")
    assert await _states(conn, [job_id]) == {job_id: ("completed", 1)}
    assert await _attempts(conn, [job_id]) == [(job_id, 1, "completed")]


async def test_a_pool_hands_out_a_live_connection_after_its_idle_ones_died(db_url: str) -> None:
    """The check before checkout closes a dead connection within its limit, and drains the
    other idle ones at once instead of checking them one by one."""
    async with DropProxy.for_url(db_url) as proxy:
        check = ConnectionCheck(0.5)
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            libpq_settings.with_defaults(proxy.url(db_url)), min_size=4, max_size=4,
            kwargs={"autocommit": True}, open=False, check=check,
        )
        check.pool = pool
        await pool.open(wait=True, timeout=10)
        try:
            assert proxy.drop_flows() == 4
            started = time.monotonic()
            async with pool.connection(timeout=10) as c:
                await asyncio.wait_for(c.execute("SELECT 1"), 2)
            took = time.monotonic() - started
            assert check.failed == 1, "one check found the dead; the rest were drained"
            assert took < 2.5, f"a live connection took {took:.1f} s"
        finally:
            await pool.close(timeout=1)


async def test_a_session_set_up_on_a_dead_connection_is_closed_not_cancelled(
    db_url: str,
) -> None:
    """The engine connection's setup statement is under the same close-not-cancel guard as
    every statement: at 683562c the guard had no connection to close yet, and psycopg's
    cancel-and-wait took 5 s more."""
    async with DropProxy.for_url(db_url) as proxy:
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            proxy.url(db_url), min_size=1, max_size=1, kwargs={"autocommit": True}, open=False
        )  # no check: the dead connection reaches the setup statement
        await pool.open(wait=True, timeout=10)
        try:
            engine = HeldConnection(
                pool, role="engine", answer_timeout=0.5,
                session_params=session_params(statement_timeout=2.0, lock_timeout=1.0),
            )
            proxy.drop_flows()
            started = time.monotonic()
            with pytest.raises(AnswerTimeout):
                async with engine.use("setting up a dead session") as c:
                    await c.execute("SELECT 1")
            took = time.monotonic() - started
            assert took < 2.0, f"giving up took {took:.1f} s"
            async with engine.use("a fresh session") as c:  # replaced, and working
                await c.execute("SELECT 1")
            await engine.close()
        finally:
            await pool.close(timeout=1)


async def test_giving_a_silent_connection_back_at_stop_closes_it_within_the_reset_limit(
    db_url: str,
) -> None:
    """A worker stopping on a silent server gives its held connections back after a
    session reset that gets no answer: the reset is closed after `RESET_SECONDS`, not
    cancelled after the answer limit (at 5d5e0ee: the limit, then psycopg's cancel, for
    each of the three held connections in turn: 21 s of a stop measured by hand)."""
    async with DropProxy.for_url(db_url) as proxy:
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            proxy.url(db_url), min_size=1, max_size=1, kwargs={"autocommit": True}, open=False
        )
        await pool.open(wait=True, timeout=10)
        try:
            engine = HeldConnection(
                pool, role="engine", answer_timeout=8.0,
                session_params=session_params(statement_timeout=2.0, lock_timeout=1.0),
            )
            async with engine.use("before the silence") as c:
                await c.execute("SELECT 1")
            proxy.drop_flows()
            started = time.monotonic()
            await engine.close()
            took = time.monotonic() - started
            assert took < RESET_SECONDS + 1.0, f"giving it back took {took:.1f} s"
        finally:
            await pool.close(timeout=1)


# --- connection settings ------------------------------------------------------------------


async def _application_names(conn: Any) -> set[str]:
    cur = await conn.execute(
        "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
    )
    return {row[0] for row in await cur.fetchall()}


async def _worker_sessions(url: str, name: str, conn: Any) -> tuple[set[str], dict[str, str]]:
    """Worker `name` on `url`: the application names the database shows while it runs, and
    the parameters of a connection from its pool."""
    async with run_workers(url, name, lease_seconds=LEASE) as (running,):
        names = await _application_names(conn)
        pool = running.worker.pool
        assert pool is not None
        async with pool.connection() as c:
            return names, c.info.get_parameters()


async def test_a_worker_s_sessions_carry_its_name_and_keepalives(db_url: str, conn: Any) -> None:
    names, params = await _worker_sessions(db_url, "w-named", conn)
    assert "taskboard-worker:w-named" in names
    assert params["application_name"] == "taskboard-worker:w-named"
    assert params["keepalives"] == "1"
    assert params["keepalives_idle"] == str(libpq_settings.KEEPALIVES_IDLE_SECONDS)
    assert params["tcp_user_timeout"] == str(libpq_settings.TCP_USER_TIMEOUT_MS)
    assert params["connect_timeout"] == str(libpq_settings.CONNECT_TIMEOUT_SECONDS)


async def test_the_url_overrides_every_setting(db_url: str, conn: Any) -> None:
    sep = "&" if "?" in db_url else "?"
    url = (
        f"{db_url}{sep}application_name=mine&connect_timeout=9&keepalives_idle=30"
        "&keepalives_interval=7&keepalives_count=4&tcp_user_timeout=20000&keepalives=0"
    )
    names, params = await _worker_sessions(url, "w-url", conn)
    assert "mine" in names
    assert not any(n.startswith("taskboard-worker") for n in names)
    assert params["application_name"] == "mine"
    assert params["connect_timeout"] == "9"
    assert params["keepalives"] == "0"
    assert params["keepalives_idle"] == "30"
    assert params["keepalives_interval"] == "7"
    assert params["keepalives_count"] == "4"
    assert params["tcp_user_timeout"] == "20000"


async def test_a_command_s_connection_takes_the_url_s_settings_over_its_defaults(
    db_url: str,
) -> None:
    """At 683562c the command line passed connect_timeout=5 itself, over the URL's."""
    sep = "&" if "?" in db_url else "?"
    conn = await db.connect(f"{db_url}{sep}connect_timeout=9&application_name=ops-check")
    async with conn:
        params = conn.info.get_parameters()
    assert params["connect_timeout"] == "9"
    assert params["application_name"] == "ops-check"
    assert params["keepalives"] == "1"
    async with db.connection(db_url) as plain:
        params = plain.info.get_parameters()
    assert params["connect_timeout"] == str(libpq_settings.CONNECT_TIMEOUT_SECONDS)
    assert params["application_name"] == libpq_settings.application_name()


def test_libpq_environment_variables_win_over_the_defaults() -> None:
    url = "postgresql://u@h/db"
    plain = psycopg.conninfo.conninfo_to_dict(libpq_settings.with_defaults(url, env={}))
    assert plain["application_name"] == libpq_settings.application_name()
    env = {"PGAPPNAME": "from-env", "PGCONNECT_TIMEOUT": "11"}
    given = psycopg.conninfo.conninfo_to_dict(libpq_settings.with_defaults(url, env=env))
    assert "application_name" not in given
    assert "connect_timeout" not in given
    assert given["keepalives"] == "1"


def _start(db_url: str, argv: list[str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TASKBOARD_DATABASE_URL": db_url}
    env.pop("DATABASE_URL", None)
    env.pop("PGAPPNAME", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", *argv], env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return proc


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["taskboard.core.cli", "status"], "taskboard-cli:status"),
        (["taskboard.tui.main"], "taskboard-tui"),
    ],
    ids=["cli", "dashboard"],
)
async def test_the_cli_and_the_dashboard_name_their_sessions(
    db_url: str, conn: Any, argv: list[str], name: str
) -> None:
    """Seen in pg_stat_activity while the process waits on a lock the test holds (its
    first read of the schema version), so the session cannot be missed."""
    # Locked on a connection of its own: pg_stat_activity is read once per transaction.
    async with await psycopg.AsyncConnection.connect(db_url) as locker:
        await locker.execute("LOCK TABLE taskboard_schema IN ACCESS EXCLUSIVE MODE")
        proc = _start(db_url, argv)
        try:
            await wait_for(
                lambda: _waiting(conn, name), timeout=30, what=f"a session named {name}"
            )
        finally:
            proc.kill()
            proc.wait(10)


async def _waiting(conn: Any, name: str) -> bool:
    cur = await conn.execute(
        "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name = %s AND wait_event_type = 'Lock'",
        (name,),
    )
    return await cur.fetchone() is not None


async def test_the_dashboard_s_embedded_workers_and_its_own_link_are_named(
    db_url: str, conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKBOARD_DATABASE_URL", db_url)
    monkeypatch.delenv("PGAPPNAME", raising=False)
    options = FleetOptions(
        workers=1, settings=WorkerSettings(lease_seconds=LEASE, pool_size=3, drain_seconds=1)
    )
    libpq_settings.name_sessions("taskboard-tui")  # what tui/main.py does first
    try:
        async with open_fleet(options) as opened:
            (worker_id,) = opened.fleet.embedded_worker_ids()
            names = await _application_names(conn)
    finally:
        libpq_settings.name_sessions(libpq_settings.DEFAULT_APPLICATION_NAME)
    assert f"taskboard-worker:{worker_id}" in names
    assert "taskboard-tui" in names


# --- what a dead connection must not cost -------------------------------------------------


async def test_housekeeping_does_not_wait_for_the_engine_connection(db_url: str) -> None:
    """Schedules and pruning borrow a pool connection: with the engine connection held (as
    by a stuck statement), both still run, so neither can hold up a renewal either."""
    async with run_workers(db_url, "w", lease_seconds=LEASE, prune_every_seconds=0) as (r,):
        crew = r.worker._crew
        assert crew is not None
        async with crew.engine.use("held by the test", timeout=30):
            await asyncio.wait_for(crew.janitor.prune_once(), 5)
            await asyncio.wait_for(crew.scheduler.tick(), 5)


async def test_a_lost_lease_closes_the_handler_s_connection_instead_of_cancelling_on_it(
    db_url: str, conn: Any
) -> None:
    """A handler blocked in a statement on a connection that went silent is stopped at
    once when its lease is lost: cancelling the statement instead would wait seconds for a
    cancel that cannot get through."""
    registry = builtin_registry()
    ended: dict[str, float] = {}

    async def sleeper(ctx: Any) -> None:
        try:
            await ctx.conn.execute("SELECT pg_sleep(60)")
        finally:
            ended.setdefault("at", time.monotonic())

    registry.register(JobKind("dbsleep", lambda p: dict(p), sleeper, writes_db=True))
    rec = Recorder()
    async with _behind_proxy(db_url, "w", recorder=rec, registry=registry) as (proxy, _):
        (job_id,) = await enqueue_many(conn, registry, [NewJob("dbsleep")])
        await wait_for(lambda: _sleeping(conn), what="the handler in pg_sleep")
        # A partition: no renewal gets through either, so the lease is lost.
        proxy.blackhole(True)
        proxy.drop_flows()
        await wait_for(
            lambda: rec.of(RenewalFailed, job_id=job_id), timeout=15, what="the lease lost"
        )
        lost = time.monotonic()
        await wait_for(lambda: "at" in ended, timeout=15, what="the handler stopped")
        proxy.blackhole(False)  # the worker drains over new connections
    took = ended["at"] - lost
    assert took < 2.0, f"the handler stopped {took:.1f} s after its lease was lost"


async def _sleeping(conn: Any) -> bool:
    cur = await conn.execute(
        "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
        " AND query = 'SELECT pg_sleep(60)' AND state = 'active'"
    )
    return await cur.fetchone() is not None


async def test_a_completion_on_a_connection_that_went_silent_gives_up_and_the_job_runs_again(
    db_url: str, conn: Any
) -> None:
    """The fenced completion and its commit on a handler's own connection have the answer
    limit too. At 683562c a completion whose connection went silent waited for ever while
    renewals on a fresh engine connection kept its lease alive: the job never finished."""
    registry = builtin_registry()

    async def write_then_hold(ctx: Any) -> None:
        await ctx.conn.execute("SELECT 1")
        if ctx.attempt == 1:
            ctx.hold_completion(1.0)  # completing, not yet sent: the window for the drop

    registry.register(JobKind("writer", lambda p: dict(p), write_then_hold, writes_db=True))
    rec = Recorder()
    async with _behind_proxy(db_url, "w", recorder=rec, registry=registry) as (
        proxy, (running,),
    ):
        (job_id,) = await enqueue_many(conn, registry, [NewJob("writer")])
        await wait_for(
            lambda: any(f.phase is Phase.COMPLETING for f in running.worker.in_flight_jobs()),
            what="the completion under way",
        )
        proxy.drop_flows()
        await wait_for(
            lambda: rec.of(Completed, job_id=job_id), timeout=30, what="the job completed"
        )
    assert await _states(conn, [job_id]) == {job_id: ("completed", 2)}
    # The abandoned completion never committed (its connection closed before COMMIT).
    assert await _attempts(conn, [job_id]) == [(job_id, 1, "lease_lost"), (job_id, 2, "completed")]


async def test_a_result_written_on_a_connection_that_went_silent_gives_up_and_the_job_runs_again(
    db_url: str, conn: Any
) -> None:
    """The result a database-writing handler returns is written in its transaction with
    the answer limit too. At 7f40996 that write had none: its connection gone silent (the
    fault run's drop, seed 1465900999), the attempt waited for ever while renewals on a
    fresh engine connection kept its lease alive, and the job never finished."""
    registry = builtin_registry()
    proxies: list[DropProxy] = []

    async def write_then_return(ctx: Any) -> dict[str, int]:
        await ctx.conn.execute("SELECT 1")
        # The first attempt's result statement meets a connection gone silent; only that
        # one: the engine connection goes on renewing the lease, as in the fault run.
        proxies[0].drop_on(b"SET result = " if ctx.attempt == 1 else None)
        return {"attempt": ctx.attempt}

    registry.register(JobKind("resulting", lambda p: dict(p), write_then_return, writes_db=True))
    rec = Recorder()
    async with DropProxy.for_url(db_url) as proxy:
        proxies.append(proxy)
        async with run_workers(proxy.url(db_url), "w", recorder=rec, registry=registry,
                               lease_seconds=2.0):
            (job_id,) = await enqueue_many(conn, registry, [NewJob("resulting")])
            await wait_for(
                lambda: rec.of(Completed, job_id=job_id), timeout=8, what="the job completed"
            )
    assert await _states(conn, [job_id]) == {job_id: ("completed", 2)}
    # The first attempt failed on the answer limit (its transaction never committed) and
    # was retried; it did not wait for ever.
    assert await _attempts(conn, [job_id]) == [(job_id, 1, "failed"), (job_id, 2, "completed")]
    cur = await conn.execute(
        "SELECT error FROM taskboard_attempts WHERE job_id = %s AND attempt = 1", (job_id,)
    )
    row = await cur.fetchone()
    assert row is not None and "result: no answer from the database" in row[0], row
    cur = await conn.execute("SELECT result FROM taskboard_jobs WHERE id = %s", (job_id,))
    assert await cur.fetchone() == ({"attempt": 2},)


async def test_a_transaction_started_on_a_connection_that_went_silent_gives_up(
    db_url: str, conn: Any
) -> None:
    """The BEGIN of a database-writing handler's transaction has the answer limit too
    (before, it had none: a connection that went silent between the pool's check and the
    BEGIN held the attempt for ever, its lease renewed)."""
    registry = builtin_registry()

    async def write(ctx: Any) -> None:
        await ctx.conn.execute("SELECT 1")

    registry.register(JobKind("writing", lambda p: dict(p), write, writes_db=True))
    rec = Recorder()
    async with DropProxy.for_url(db_url) as proxy:
        async with run_workers(proxy.url(db_url), "w", recorder=rec, registry=registry,
                               lease_seconds=2.0):
            # Only handlers' transactions send BEGIN once the worker runs (its own
            # connections are autocommit).
            proxy.drop_on(b"BEGIN")
            (job_id,) = await enqueue_many(conn, registry, [NewJob("writing")])
            await wait_for(lambda: proxy.live_flows < proxy.open_flows, what="BEGIN dropped")
            # Long before the first attempt can give up (its answer limit) and retry.
            proxy.drop_on(None)
            await wait_for(
                lambda: rec.of(Completed, job_id=job_id), timeout=8, what="the job completed"
            )
    assert await _attempts(conn, [job_id]) == [(job_id, 1, "failed"), (job_id, 2, "completed")]
    cur = await conn.execute(
        "SELECT error FROM taskboard_attempts WHERE job_id = %s AND attempt = 1", (job_id,)
    )
    row = await cur.fetchone()
    assert row is not None and "transaction start: no answer" in row[0], row


async def test_a_rollback_on_a_connection_that_went_silent_gives_up_and_the_job_runs_again(
    db_url: str, conn: Any
) -> None:
    """A database-writing handler that raised: its transaction's ROLLBACK has the answer
    limit too, and the attempt fails for the handler's own reason. Before, the rollback had
    none: on a connection gone silent (the fault run's drop, seed 78518193: a billing job
    stuck in its transaction's exit for 60 s) it waited for ever while renewals on a fresh
    engine connection kept the lease alive, and the job never finished."""
    registry = builtin_registry()

    async def write_then_fail(ctx: Any) -> None:
        await ctx.conn.execute("SELECT 1")
        if ctx.attempt == 1:
            raise RuntimeError("the card network said try again")

    registry.register(JobKind("failing", lambda p: dict(p), write_then_fail, writes_db=True))
    rec = Recorder()
    async with DropProxy.for_url(db_url) as proxy:
        async with run_workers(proxy.url(db_url), "w", recorder=rec, registry=registry,
                               lease_seconds=2.0, retry_base_seconds=0.1):
            # Only handlers' transactions roll back once the worker runs (its own
            # connections are autocommit): the first attempt's rollback goes silent.
            proxy.drop_on(b"ROLLBACK", once=True)
            (job_id,) = await enqueue_many(conn, registry, [NewJob("failing")])
            await wait_for(
                lambda: rec.of(Completed, job_id=job_id), timeout=8, what="the job completed"
            )
            assert proxy.live_flows < proxy.open_flows  # the rollback's flow went silent
    assert await _attempts(conn, [job_id]) == [(job_id, 1, "failed"), (job_id, 2, "completed")]
    cur = await conn.execute(
        "SELECT error FROM taskboard_attempts WHERE job_id = %s AND attempt = 1", (job_id,)
    )
    row = await cur.fetchone()
    assert row is not None and "the card network said try again" in row[0], row


async def test_housekeeping_waits_its_turn_while_handlers_hold_every_connection(
    db_url: str, conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy pool is no database outage: the janitor waits for a connection past the
    pool's timeout instead of failing (which would count towards a burst worker's exit)."""
    monkeypatch.setattr(worker_pool, "POOL_TIMEOUT_SECONDS", 1.0)
    registry = builtin_registry()
    holding = asyncio.Event()
    release = asyncio.Event()

    async def hold(ctx: Any) -> None:
        await ctx.conn.execute("SELECT 1")
        holding.set()
        await release.wait()

    registry.register(JobKind("hold", lambda p: dict(p), hold, writes_db=True))
    async with run_workers(
        db_url, "w", registry=registry, lease_seconds=LEASE, pool_size=3, prune_every_seconds=0
    ) as (r,):
        crew = r.worker._crew
        assert crew is not None
        await enqueue_many(conn, registry, [NewJob("hold")])
        await asyncio.wait_for(holding.wait(), 10)  # engine, control, this handler: all 3
        pruning = asyncio.create_task(crew.janitor.prune_once())
        await asyncio.sleep(2.5)  # past the pool's timeout of 1 s
        assert not pruning.done(), pruning
        release.set()
        assert await asyncio.wait_for(pruning, 10) == 0
