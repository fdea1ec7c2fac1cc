"""Retry and cancel by filter (issue 26, "the operator after an outage"): the jobs the filter
names and no others, each with a line in its history, while a worker keeps running; a dry
run changes nothing; a row changed under a batch is decided on as it was left."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from taskboard.core.kinds import builtin_registry
from taskboard.core.operations.job_bulk import JobFilter, cancel_matching, preview, retry_matching
from taskboard.core.queue.jobs import NewJob, enqueue_many, retry

from tests.conftest import wait_for
from tests.harness import run_workers
from tests.test_cli import assert_one_line_error, run_cli
from tests.test_operator_races import blocked, connect, one

Conn = psycopg.AsyncConnection[Any]
REG = builtin_registry()


async def first(conn: Conn, query: str, *params: Any) -> Any:
    """The first column of the first row, None without one. (`one` returns the row: a
    `(False,)` is truthy, so a wait on it passed at once; the cancel then reached the long
    sleep before the worker had claimed it, and no attempt could end `cancelled`.)"""
    row = await one(conn, query, *params)
    return None if row is None else row[0]


async def dead_jobs(conn: Conn, kind: str, n: int, died_ago: str, error: str) -> list[int]:
    """`n` jobs of `kind` that used their attempts and died `died_ago` (an interval)."""
    cur = await conn.execute(
        "INSERT INTO taskboard_jobs (kind, queue, attempts, max_attempts, failed_at,"
        " last_error, created_at)"
        " SELECT %s, 'default', 3, 3, now() - %s::interval, %s, now() - %s::interval"
        "   FROM generate_series(1, %s) RETURNING id",
        (kind, died_ago, error, died_ago, n),
    )
    return sorted(r[0] for r in await cur.fetchall())


async def rows(conn: Conn) -> dict[int, tuple[Any, ...]]:
    cur = await conn.execute(
        "SELECT id, failed_at, cancelled_at, attempts, run_at, last_error FROM taskboard_jobs"
    )
    return {r[0]: r[1:] for r in await cur.fetchall()}


async def acted_on(conn: Conn, action: str) -> list[int]:
    cur = await conn.execute(
        "SELECT job_id FROM taskboard_job_actions WHERE action = %s ORDER BY job_id", (action,)
    )
    return [r[0] for r in await cur.fetchall()]


async def test_retry_by_filter_retries_exactly_the_named_jobs_while_a_worker_runs(
    db_url: str, conn: Conn
) -> None:
    """1,000 dead jobs of two kinds; `retry --kind billing --state dead --since 1h` takes the
    recent billing ones only (not the old ones, not the emails), while a worker churns
    through another queue; `--dry-run` before it changes nothing at all."""
    billing = await dead_jobs(conn, "billing", 450, "10 minutes", "stripe: 503")
    old_billing = await dead_jobs(conn, "billing", 50, "3 hours", "stripe: 503")
    emails = await dead_jobs(conn, "email", 500, "10 minutes", "smtp: 421")
    churn = await enqueue_many(
        conn, REG, [NewJob("sleep", {"seconds": 0.01}, queue="other") for _ in range(200)]
    )
    before = await rows(conn)
    flags = ["--kind", "billing", "--state", "dead", "--since", "1h"]
    async with run_workers(db_url, "churner", queues=["other"], concurrency=4):
        await wait_for(
            lambda: first(conn, "SELECT count(*) > 0 FROM taskboard_jobs WHERE completed_at"
                          " IS NOT NULL AND queue = 'other'"),
            what="the worker to complete some of its jobs",
        )
        dry = await asyncio.to_thread(run_cli, db_url, "retry", *flags, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert "would have retried 450 jobs" in dry.stdout, dry.stdout
        assert ", ".join(f"#{i}" for i in billing[:10]) + ", ..." in dry.stdout, dry.stdout
        assert "nothing changed" in dry.stdout
        after_dry = await rows(conn)
        assert {i: after_dry[i] for i in before if i not in churn} == {
            i: v for i, v in before.items() if i not in churn
        }, "a dry run changed a dead job"
        assert await acted_on(conn, "retried") == []

        done = await asyncio.to_thread(run_cli, db_url, "retry", *flags, "--batch", "100")
        assert done.returncode == 0, done.stderr
        assert "retried 450 jobs" in done.stdout and "in 5 batches" in done.stdout, done.stdout
    after = await rows(conn)
    for i in billing:
        failed_at, cancelled_at, attempts, _run_at, last_error = after[i]
        assert (failed_at, cancelled_at, attempts, last_error) == (None, None, 0, None), i
    for i in old_billing + emails:
        assert after[i] == before[i], f"job {i} did not match the filter and was changed"
    assert await acted_on(conn, "retried") == billing
    history = await asyncio.to_thread(run_cli, db_url, "history", str(billing[0]))
    assert "retried  by filter --kind billing --state dead --since 3600s" in history.stdout, (
        history.stdout
    )


async def test_bulk_retry_decides_on_a_row_changed_while_it_waited(
    db_url: str, conn: Conn
) -> None:
    """A batch's candidates are read without locks; the retry statement then waits on a row
    another operator holds. That operator retries the job and commits: the bulk retry must
    not retry it again (re-checked on the row), nor take a job that died after it began."""
    ids = await dead_jobs(conn, "billing", 5, "1 minute", "stripe: 503")
    target = ids[2]
    async with connect(db_url) as operator, connect(db_url) as bulk:
        async with operator.transaction():
            await retry(operator, target)
            running = await blocked(
                conn, bulk, retry_matching(bulk, JobFilter(kind="billing"), batch=10)
            )
            [late] = await dead_jobs(conn, "billing", 1, "0 seconds", "stripe: 503")
        done = await running
    assert done.done == 4 and done.refused == []
    assert await acted_on(conn, "retried") == [i for i in ids if i != target]
    assert await one(conn, "SELECT failed_at IS NOT NULL FROM taskboard_jobs WHERE id = %s",
                     late) == (True,), "a job that died after the command began was retried"


async def test_cancel_by_filter_cancels_unfinished_jobs_of_one_kind_and_tells_the_holder(
    db_url: str, conn: Conn
) -> None:
    """`cancel --kind sleep` cancels the pending sleep jobs and the one a worker is running
    (its attempt ends `cancelled`), and leaves the noop jobs alone."""
    [held] = await enqueue_many(conn, REG, [NewJob("sleep", {"seconds": 30})])
    async with run_workers(db_url, "holder", concurrency=1):
        await wait_for(
            lambda: first(conn, "SELECT lease_token IS NOT NULL FROM taskboard_jobs WHERE id = %s",
                          held),
            what="the worker to claim the long sleep",
        )
        pending = await enqueue_many(
            conn, REG, [NewJob("sleep", {"seconds": 1}, queue="parked") for _ in range(30)]
        )
        others = await enqueue_many(conn, REG, [NewJob("noop", queue="parked") for _ in range(5)])
        p = await preview(conn, "cancel", JobFilter(kind="sleep"))
        assert p.count == 31 and p.first_ids[0] == held
        done = await cancel_matching(conn, JobFilter(kind="sleep"), batch=7)
        assert done.done == 31 and done.batches == 5
        # The latest attempt: on a loaded machine the holder may have lost its lease once
        # and claimed the job again before the cancel reached it.
        await wait_for(
            lambda: first(conn, "SELECT outcome = 'cancelled' FROM taskboard_attempts"
                          " WHERE job_id = %s ORDER BY attempt DESC LIMIT 1", held),
            what="the held job's attempt to end cancelled",
        )
    assert await acted_on(conn, "cancelled") == sorted([held, *pending])
    left = await one(
        conn, "SELECT count(*) FROM taskboard_jobs WHERE id = ANY(%s) AND cancelled_at IS NULL",
        others,
    )
    assert left == (5,)


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["retry"], ["needs a job id or at least one of --kind"]),
        (["retry", "5", "--kind", "billing"], ["job id or filters", "not both"]),
        (["cancel", "--state", "dead"], ["invalid choice"]),
        (["retry", "--kind", "billing", "--batch", "0"], ["--batch must be between 1"]),
    ],
)
def test_bulk_commands_refuse_bad_input_on_one_line(
    db_url: str, args: list[str], needles: list[str]
) -> None:
    assert_one_line_error(run_cli(db_url, *args), *needles)


async def test_error_and_queue_filters_narrow_a_dry_run(db_url: str, conn: Conn) -> None:
    """`--error` matches the last error's text in any case; `--queue` the queue."""
    declined = await dead_jobs(conn, "billing", 3, "5 minutes", "card_declined: Your card")
    await dead_jobs(conn, "billing", 4, "5 minutes", "stripe: 503")
    await conn.execute("UPDATE taskboard_jobs SET queue = 'payments' WHERE id = %s",
                       (declined[0],))
    by_error = await asyncio.to_thread(
        run_cli, db_url, "retry", "--error", "CARD_DECLINED", "--dry-run"
    )
    assert "would have retried 3 jobs" in by_error.stdout, by_error.stdout
    both = await asyncio.to_thread(
        run_cli, db_url, "retry", "--error", "declined", "--queue", "payments", "--dry-run"
    )
    assert f"would have retried 1 job matching --queue payments --error 'declined': " \
           f"#{declined[0]};" in both.stdout, both.stdout
    assert await acted_on(conn, "retried") == []
