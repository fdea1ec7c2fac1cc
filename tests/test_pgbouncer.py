"""Taskboard behind a real PgBouncer (the distribution's package, tests/pgbouncer.py).

Session mode: the lease protocol, real workers, renewals and cancel by NOTIFY all work as
with a direct connection. Transaction (and statement) mode: a worker refuses at start, in
one line naming the fix, and `taskboard worker` exits 2; the one-shot commands work, on a
pool warmed so that a client's consecutive transactions really land on different server
connections (round robin), which is the case that breaks session state.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import psycopg
import pytest
from taskboard.core.base.errors import ConfigError
from taskboard.core.cli.main import main
from taskboard.core.engine import attempt_log, leases
from taskboard.core.engine.events import (
    Cancelled,
    Claimed,
    Completed,
    CompletionRejected,
    LeaseGivenUp,
    RenewalFailed,
)
from taskboard.core.engine.pooler import TRANSACTION_POOLING, refuse_transaction_pooling
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker import Worker
from taskboard.core.kinds import JobContext, JobKind, builtin_registry
from taskboard.core.queue.jobs import NewJob, cancel, enqueue, enqueue_many
from taskboard.core.view.status import job_history

from tests.conftest import wait_for
from tests.harness import Recorder, run_workers
from tests.pgbouncer import PgBouncer, pgbouncer_version, running_pgbouncer
from tests.test_cli import assert_one_line_error, run_cli
from tests.test_lease_protocol import claim_one, sleep_past

REG = builtin_registry()
DONE, REJECTED = leases.Verdict.DONE, leases.Verdict.REJECTED
SERVERS = 4  # server connections warmed up behind a transaction-mode pool


def test_pgbouncer_is_the_real_one(pgbouncer_session: PgBouncer) -> None:
    assert pgbouncer_version().startswith("PgBouncer 1.")
    assert "process up: PgBouncer" in pgbouncer_session.log


# --- session mode: what a worker needs, through PgBouncer ---------------------------------


async def test_session_mode_the_fenced_timeline(db_url: str, pgbouncer_session: PgBouncer):
    """Claim, renew, expire, reclaim, and the stale completion changing zero rows."""
    url = pgbouncer_session.url(db_url)
    async with (
        await psycopg.AsyncConnection.connect(url, autocommit=True) as a_conn,
        await psycopg.AsyncConnection.connect(url, autocommit=True) as b_conn,
    ):
        job_id = await enqueue(a_conn, REG, "noop")
        a = await claim_one(a_conn, "worker-a", lease=0.4)
        assert await leases.renew(a_conn, [(a.id, a.token)], lease_seconds=0.4) == {
            (a.id, a.token): DONE
        }
        await sleep_past(a_conn, a)
        b = await claim_one(b_conn, "worker-b", lease=30)
        assert b.id == job_id and b.is_reclaim and b.previous_token == a.token
        assert await leases.renew(a_conn, [(a.id, a.token)], lease_seconds=30) == {
            (a.id, a.token): REJECTED
        }
        assert await leases.complete(a_conn, a.id, a.token) is False
        await attempt_log.record_rejected(a_conn, [(a.id, a.token)])
        assert await leases.complete(b_conn, b.id, b.token) is True
        history = await job_history(b_conn, job_id)
    assert [(h["worker"], h["outcome"]) for h in history] == [
        ("worker-a", "completion_rejected"), ("worker-b", "completed"),
    ]


async def test_session_mode_workers_run_jobs_and_renew(
    db_url: str, conn: psycopg.AsyncConnection[Any], pgbouncer_session: PgBouncer
) -> None:
    url = pgbouncer_session.url(db_url)
    rec = Recorder()
    async with run_workers(url, "a", "b", recorder=rec, lease_seconds=1.0, poll_seconds=30):
        await asyncio.sleep(0.2)  # idle on their 30 s poll: only NOTIFY wakes them in time
        started = time.monotonic()
        ids = [await enqueue(conn, REG, "noop") for _ in range(20)]
        long_job = await enqueue(conn, REG, "sleep", {"seconds": 2.5})  # > the 1 s lease
        await wait_for(lambda: {e.job_id for e in rec.of(Completed)} >= {*ids, long_job},
                       timeout=20, what="every job completed")
        took = time.monotonic() - started
    assert rec.of(RenewalFailed) == [] and rec.of(LeaseGivenUp) == []
    assert [c.attempt for c in rec.of(Claimed, job_id=long_job)] == [1]  # renewed, kept
    assert took < 10  # woken by NOTIFY, not by the 30 s poll
    cur = await conn.execute("SELECT count(*) FROM taskboard_jobs WHERE completed_at IS NULL")
    assert (await cur.fetchone())[0] == 0


async def test_session_mode_a_stalled_worker_is_reclaimed_and_fenced(
    db_url: str, conn: psycopg.AsyncConnection[Any], pgbouncer_session: PgBouncer
) -> None:
    url = pgbouncer_session.url(db_url)
    registry = builtin_registry()

    async def work_then_hold(ctx: JobContext) -> None:
        ctx.hold_completion(0.8)  # done, not yet marked complete

    registry.register(JobKind("held", lambda p: dict(p), work_then_hold))
    rec = Recorder()
    async with run_workers(url, "a", recorder=rec, registry=registry, lease_seconds=1.0) as [a]:
        job_id = await enqueue(conn, registry, "held")
        await wait_for(lambda: rec.of(Claimed, worker_id="a"), what="A claims")
        a.worker.pause()  # A stalls; its lease expires
        async with run_workers(url, "b", recorder=rec, registry=registry, lease_seconds=30):
            await wait_for(lambda: rec.of(Completed, worker_id="b"), timeout=15, what="B done")
            a.worker.resume()
            await wait_for(lambda: rec.of(CompletionRejected, worker_id="a"), what="A fenced")
    assert rec.of(Completed, worker_id="a") == []
    [b_claim] = rec.of(Claimed, worker_id="b")
    assert b_claim.previous_worker == "a" and b_claim.attempt == 2
    history = await job_history(conn, job_id)
    assert [h["outcome"] for h in history] == ["completion_rejected", "completed"]


async def test_session_mode_cancel_reaches_the_worker_by_notify(
    db_url: str, conn: psycopg.AsyncConnection[Any], pgbouncer_session: PgBouncer
) -> None:
    url = pgbouncer_session.url(db_url)
    rec = Recorder()
    # The next renewal (which would also notice) is 10 s away: only NOTIFY is this fast.
    async with run_workers(url, "w", recorder=rec, lease_seconds=30):
        job_id = await enqueue(conn, REG, "sleep", {"seconds": 60})
        await wait_for(lambda: rec.of(Claimed, job_id=job_id), what="running")
        started = time.monotonic()
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as operator:
            await cancel(operator, job_id)
        await wait_for(lambda: rec.of(Cancelled, job_id=job_id), timeout=3, what="stopped")
        took = time.monotonic() - started
    assert took < 1.0
    [attempt] = await job_history(conn, job_id)
    assert attempt["outcome"] == "cancelled"


async def test_the_start_probe_passes_direct_and_through_session_mode(
    db_url: str, conn: psycopg.AsyncConnection[Any], pgbouncer_session: PgBouncer
) -> None:
    await refuse_transaction_pooling(conn, db_url)
    url = pgbouncer_session.url(db_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as bounced:
        await refuse_transaction_pooling(bounced, url)


# --- transaction mode: workers refuse, one-shot commands work -----------------------------


def warm(url: str, servers: int = SERVERS) -> None:
    """Make PgBouncer open `servers` server connections (one per open transaction), and
    check that consecutive transactions of one client now change server connection."""
    clients = [psycopg.connect(url) for _ in range(servers)]
    pids = {c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in clients}  # type: ignore[index]
    for c in clients:
        c.commit()  # a client gone mid-transaction would take its server connection along
        c.close()
    assert len(pids) == servers
    with psycopg.connect(url, autocommit=True) as c:
        seen = {c.execute("SELECT pg_backend_pid()").fetchone()[0] for _ in range(servers)}  # type: ignore[index]
    assert len(seen) > 1, "transaction pooling did not move the client between servers"


async def test_transaction_mode_loses_session_state_between_transactions(
    db_url: str, pgbouncer_transaction: PgBouncer
) -> None:
    """Why a worker refuses: its session settings do not follow it from one transaction
    to the next (and are left behind for whoever gets that server connection)."""
    url = pgbouncer_transaction.url(db_url)
    warm(url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as c:
        await c.execute("SELECT set_config('statement_timeout', '1234ms', false)")
        seen = [
            (await (await c.execute("SHOW statement_timeout")).fetchone())[0]  # type: ignore[index]
            for _ in range(SERVERS)
        ]
    assert "1234ms" in seen and set(seen) != {"1234ms"}, seen


async def test_transaction_mode_a_worker_refuses_at_start_in_one_line(
    db_url: str, conn: psycopg.AsyncConnection[Any], pgbouncer_transaction: PgBouncer
) -> None:
    url = pgbouncer_transaction.url(db_url)
    worker = Worker(url, registry=REG, settings=WorkerSettings(worker_id="w1", pool_size=4))
    with pytest.raises(ConfigError) as refused:
        await asyncio.wait_for(worker.run(), 30)
    message = str(refused.value)
    assert message == f"worker w1: {TRANSACTION_POOLING}"
    assert "\n" not in message and "pool_mode = session" in message
    assert worker.pool is None  # refused before opening its pool
    cur = await conn.execute("SELECT count(*) FROM taskboard_workers")
    assert (await cur.fetchone())[0] == 0  # never registered


@pytest.mark.parametrize("round_robin", [False, True], ids=["lifo", "round-robin"])
async def test_the_start_probe_refuses_transaction_and_statement_mode(
    db_url: str, tmp_path_factory: pytest.TempPathFactory, pg_server_url: str,
    round_robin: bool,
) -> None:
    """PgBouncer's default LIFO reuse (a client often gets its own server back) and round
    robin alike; statement mode refuses the probe's transaction itself."""
    for mode in ("transaction", "statement"):
        folder = tmp_path_factory.mktemp(f"pgb-{mode}")
        with running_pgbouncer(pg_server_url, mode, folder, round_robin=round_robin) as b:  # type: ignore[arg-type]
            url = b.url(db_url)
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as c:
                with pytest.raises(ConfigError, match="pool_mode = session"):
                    await refuse_transaction_pooling(c, url)


def test_transaction_mode_taskboard_worker_exits_2_in_one_line(
    db_url: str, pgbouncer_transaction: PgBouncer
) -> None:
    url = pgbouncer_transaction.url(db_url)
    proc = run_cli(url, "worker", "--pool-size", "4", timeout=60)
    assert_one_line_error(proc, "taskboard worker: error: ", TRANSACTION_POOLING)
    assert pgbouncer_transaction.password not in proc.stderr + proc.stdout
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM taskboard_workers").fetchone() == (0,)


def cli(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[str, str]:
    """`taskboard ARGS` in this process (a subprocess each costs a second); must exit 0."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TASKBOARD_DATABASE_URL", url)
        env.delenv("DATABASE_URL", raising=False)
        code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, (args, code, out, err)
    return out, err


def _one(url: str, query: str, *params: Any) -> Any:
    with psycopg.connect(url, autocommit=True) as c:
        return c.execute(query, params).fetchone()


def test_transaction_mode_every_one_shot_command_works(
    db_url: str, pg_server_url: str, pgbouncer_transaction: PgBouncer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """migrate, enqueue (with a key), status, cancel, retry, history, prune (many batches:
    prepared statements would break it), schedule add/list/remove, queue pause/list/resume:
    each through transaction pooling, each checked in the database directly."""
    with psycopg.connect(pg_server_url, autocommit=True) as c:  # an empty database
        c.execute('DROP DATABASE IF EXISTS "tb_pgb_empty" WITH (FORCE)')
        c.execute('CREATE DATABASE "tb_pgb_empty"')
    try:
        empty = pgbouncer_transaction.url(db_url.rsplit("/", 1)[0] + "/tb_pgb_empty")
        warm(empty)
        assert cli(capsys, empty, "migrate")[0].startswith("schema at version")
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as c:
            c.execute('DROP DATABASE IF EXISTS "tb_pgb_empty" WITH (FORCE)')

    url = pgbouncer_transaction.url(db_url)
    warm(url)
    sleep = ("enqueue", "sleep", "--payload", '{"seconds": 1}', "--key", "k1")
    job = int(cli(capsys, url, *sleep)[0])
    out, err = cli(capsys, url, *sleep)
    assert int(out) == job and f"already enqueued as #{job}" in err
    assert json.loads(cli(capsys, url, "status", "--json")[0])["counts"]["pending"] == 1

    asyncio.run(_claim(db_url))  # an attempt, for history
    assert cli(capsys, url, "cancel", str(job))[0] == f"job {job} cancelled\n"
    assert _one(db_url, "SELECT cancelled_at IS NOT NULL FROM taskboard_jobs WHERE id = %s",
                job) == (True,)
    assert cli(capsys, url, "retry", str(job))[0] == f"job {job} is pending again\n"
    assert "cancelled" in cli(capsys, url, "history", str(job))[0]

    with psycopg.connect(db_url, autocommit=True) as direct:
        direct.execute("INSERT INTO taskboard_jobs (kind, completed_at)"
                       " SELECT 'noop', now() - interval '2 days' FROM generate_series(1, 12)")
    out, _ = cli(capsys, url, "prune", "--batch", "1")
    assert out == "pruned 12 finished jobs and 0 workers\n"
    assert _one(db_url, "SELECT count(*) FROM taskboard_jobs") == (1,)

    out, _ = cli(capsys, url, "schedule", "add", "nightly", "--cron", "0 3 * * *", "noop")
    assert out.startswith("schedule nightly added")
    listed = json.loads(cli(capsys, url, "schedule", "list", "--json")[0])
    assert [s["name"] for s in listed] == ["nightly"]
    cli(capsys, url, "schedule", "remove", "nightly")
    assert _one(db_url, "SELECT count(*) FROM taskboard_schedules") == (0,)

    cli(capsys, url, "queue", "pause", "default")
    assert "paused" in cli(capsys, url, "queue", "list")[0]
    assert _one(db_url, "SELECT count(*) FROM taskboard_queues WHERE paused_at IS NOT NULL") == (
        1,
    )
    cli(capsys, url, "queue", "resume", "default")
    assert _one(db_url, "SELECT count(*) FROM taskboard_queues WHERE paused_at IS NOT NULL") == (
        0,
    )


async def _claim(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as c:
        await claim_one(c, "w", lease=30)


async def test_transaction_mode_enqueue_and_cancel_reach_a_directly_connected_worker(
    db_url: str, pgbouncer_transaction: PgBouncer
) -> None:
    """The mixed deployment: the application and the operator's commands through
    transaction pooling, the workers connected directly. NOTIFY is sent at commit, so it
    crosses the pooler: the idle worker wakes at once, the cancel stops the handler."""
    url = pgbouncer_transaction.url(db_url)
    warm(url)
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, lease_seconds=30, poll_seconds=30):
        await asyncio.sleep(0.2)
        started = time.monotonic()
        proc = await asyncio.to_thread(
            run_cli, url, "enqueue", "sleep", "--payload", '{"seconds": 60}'
        )
        assert proc.returncode == 0, proc.stderr
        job_id = int(proc.stdout)
        await wait_for(lambda: rec.of(Claimed, job_id=job_id), timeout=10, what="claimed")
        assert time.monotonic() - started < 10  # not the 30 s poll
        started = time.monotonic()
        assert (await asyncio.to_thread(run_cli, url, "cancel", str(job_id))).returncode == 0
        await wait_for(lambda: rec.of(Cancelled, job_id=job_id), timeout=10, what="stopped")
        took = time.monotonic() - started
    # A command's start-up (a second or two on a busy host), not the renewal 10 s away.
    assert took < 6


async def test_transaction_mode_an_application_enqueues_without_prepared_statements(
    db_url: str, conn: psycopg.AsyncConnection[Any], pgbouncer_transaction: PgBouncer
) -> None:
    """What the README tells an application: the same statement many times on one
    connection, each transaction on another server connection, with `prepare_threshold`
    off (with psycopg's default, the sixth would look for a statement prepared elsewhere)."""
    url = pgbouncer_transaction.url(db_url)
    warm(url)
    async with await psycopg.AsyncConnection.connect(
        url, autocommit=True, prepare_threshold=None
    ) as app:
        ids = [await enqueue(app, REG, "noop") for _ in range(12)]
        ids += await enqueue_many(app, REG, [NewJob("noop") for _ in range(5)])
    cur = await conn.execute("SELECT count(*) FROM taskboard_jobs WHERE id = ANY(%s)", (ids,))
    assert (await cur.fetchone())[0] == 17
