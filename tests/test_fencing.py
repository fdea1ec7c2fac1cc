"""The attempt number as a fencing token: `taskboard_fence`, called by an application in
its own transaction, refuses a write from an older attempt than the newest it has seen."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from taskboard.core import JobContext, JobKind, KindRegistry, enqueue

from tests import worker_procs as wp
from tests.conftest import wait_for
from tests.harness import run_workers


def test_the_fence_orders_attempts_of_a_job_and_refuses_an_older_one(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        fence = "SELECT taskboard_fence(%s, %s, %s)"
        assert conn.execute(fence, ("invoice:7", 7, 2)).fetchone() == (2,)
        assert conn.execute(fence, ("invoice:7", 7, 2)).fetchone() == (2,)  # the same again
        with pytest.raises(psycopg.Error, match="attempt 1 of job 7 is older than attempt 2") \
                as refused:
            conn.execute(fence, ("invoice:7", 7, 1))
        assert refused.value.sqlstate == "TB409"
        assert conn.execute(fence, ("invoice:7", 7, 5)).fetchone() == (5,)
        assert conn.execute(fence, ("invoice:8", 8, 1)).fetchone() == (1,)  # its own resource


def test_a_stalled_attempts_late_write_is_refused_after_the_next_attempt_wrote(
    db_url: str, tmp_path: Path
) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        for table in ("stage", "ledger", "refused"):
            conn.execute(f"CREATE TABLE {table} (job_id bigint, attempt bigint)")
        conn.execute("INSERT INTO taskboard_jobs (kind, payload)"
                     " VALUES ('fenced', '{\"pause\": 1.0}')")
    quick = ("--drain-timeout", "0")
    with wp.workers(db_url, tmp_path, 1, *quick, prefix="first") as (first,):
        # Attempt 1 is inside its external call, past every check the worker makes: stall it.
        wp.until(db_url, "SELECT count(*) = 1 FROM stage", timeout=20, step=0.01)
        first.send_signal(signal.SIGSTOP)
        with wp.workers(db_url, tmp_path, 1, *quick, prefix="second"):
            wp.until(db_url, "SELECT count(*) = 1 FROM ledger", timeout=20)
            first.send_signal(signal.SIGCONT)  # attempt 1 wakes and writes, late
            wp.until(db_url, "SELECT count(*) = 1 FROM refused", timeout=20)
    assert wp.rows(db_url, "SELECT attempt FROM ledger") == [(2,)]
    assert wp.rows(db_url, "SELECT attempt FROM refused") == [(1,)]
    assert wp.rows(db_url, "SELECT attempt FROM taskboard_fences") == [(2,)]
    assert wp.rows(db_url, "SELECT claim_count, completed_at IS NOT NULL FROM taskboard_jobs"
                   ) == [(2, True)]


async def test_the_attempt_sent_out_only_grows_when_a_snooze_gives_the_retry_back(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    """`ctx.attempt` is the retry budget (a snooze gives it back); the attempt number of
    the ticket (X-Taskboard-Attempt, what the fence orders) never goes back."""
    seen: list[tuple[int, str]] = []
    registry = KindRegistry(builtins=False)

    async def twice(ctx: JobContext) -> None:
        async with ctx.external("probe") as ticket:
            seen.append((ctx.attempt, ticket.headers()["X-Taskboard-Attempt"]))
        if len(seen) == 1:
            ctx.snooze(0.1)

    registry.register(JobKind("twice", lambda p: dict(p), twice))
    await enqueue(conn, registry, "twice", {})
    async with run_workers(db_url, "w-fence", registry=registry, poll_seconds=0.2):
        await wait_for(lambda: len(seen) == 2, what="the snoozed job's second run")
    assert seen == [(1, "1"), (1, "2")]
