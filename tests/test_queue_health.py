"""Queue health (issue 26): a transaction held open in another session while jobs churn is
named (pid, application, since when), the dead rows it keeps are counted and graded, the
advice says what to do; once it ends, vacuum cleans up and the grade is ok again."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue_many
from taskboard.core.view.health import HealthReport, Thresholds, read_health

from tests.conftest import wait_for
from tests.harness import run_workers
from tests.test_cli import run_cli

Conn = psycopg.AsyncConnection[Any]
REG = builtin_registry()
# Low enough for a test's few hundred jobs, the same shape as the defaults.
LOW = Thresholds(
    holder_amber_seconds=0.5, holder_red_seconds=3600, dead_amber_rows=300,
    dead_red_rows=10**9, dead_amber_share=0.1,
)
JOBS = 300


async def jobs_dead_rows(report: HealthReport) -> int:
    return next(t.n_dead_tup for t in report.tables if t.relname == "taskboard_jobs")


async def test_a_transaction_held_open_while_jobs_churn_is_named_and_graded(
    db_url: str, conn: Conn
) -> None:
    held = await psycopg.AsyncConnection.connect(
        db_url, autocommit=True, application_name="nightly-report"
    )
    try:
        # A snapshot held open, as an idle psql session in a REPEATABLE READ transaction.
        await held.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await held.execute("SELECT count(*) FROM taskboard_jobs")
        ids = await enqueue_many(conn, REG, [NewJob("noop") for _ in range(JOBS)])
        async with run_workers(db_url, "churn", concurrency=8):
            await wait_for(
                lambda: _all_completed(conn, ids), timeout=60, what="the churn to finish"
            )
        # Vacuum runs now, and cannot remove what the held snapshot may still need.
        await conn.execute("VACUUM taskboard_jobs")

        async def graded() -> HealthReport | None:
            # The holder is graded once its snapshot is older than LOW's half second: the
            # churn and the workers' stop can take less than that.
            r = await read_health(conn, LOW)
            held_long = any("has held a snapshot" in text for _, text in r.findings)
            return r if held_long and await jobs_dead_rows(r) >= JOBS else None

        report = await wait_for(graded, timeout=20, step=0.2, what="an amber reading")
        assert report.holder is not None
        assert report.holder.pid == held.info.backend_pid
        assert report.holder.application == "nightly-report"
        assert report.holder.xact_start is not None and report.holder.query_start is not None
        assert f"pg_terminate_backend({held.info.backend_pid})" in report.advice
        assert "nightly-report" in report.advice
        texts = " | ".join(text for _, text in report.findings)
        assert "taskboard_jobs has" in texts and "dead row versions" in texts, texts
        assert report.claim_mean_ms is None
        assert "pg_stat_statements" in report.claim_note

        cli = await asyncio.to_thread(run_cli, db_url, "health", "--window", "0")
        assert cli.returncode == 0, cli.stderr
        assert f"oldest snapshot: pid {held.info.backend_pid}  nightly-report" in cli.stdout, (
            cli.stdout
        )
        assert "taskboard_jobs" in cli.stdout
        assert "pg_stat_statements is not installed" in cli.stdout
    finally:
        pid = held.info.backend_pid
        await held.close()

    # The holder gone (its backend exits a moment after the client closes), vacuum removes
    # the dead rows and nothing is flagged.
    await wait_for(lambda: _gone(conn, pid), what="the holder's backend to exit")
    await conn.execute("VACUUM taskboard_jobs")

    async def clean() -> HealthReport | None:
        r = await read_health(conn, LOW)
        return r if r.level == "ok" and await jobs_dead_rows(r) < JOBS else None

    report = await wait_for(clean, timeout=20, step=0.2, what="an ok reading after vacuum")
    assert report.advice.startswith("nothing holds cleanup back")


async def _all_completed(conn: Conn, ids: list[int]) -> bool:
    cur = await conn.execute(
        "SELECT count(*) FROM taskboard_jobs WHERE id = ANY(%s) AND completed_at IS NOT NULL",
        (ids,),
    )
    row = await cur.fetchone()
    return bool(row and row[0] == len(ids))


async def _gone(conn: Conn, pid: int) -> bool:
    cur = await conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
    row = await cur.fetchone()
    return bool(row and row[0] == 0)
