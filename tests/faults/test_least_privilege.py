"""Workers run as the least-privileged role of `docs/least-privilege.sql`: they claim,
renew, complete, fail and record billing under it, and it cannot change the schema or
delete anything.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql
from taskboard.core.engine.schema import SCHEMA_VERSION, migrate
from taskboard.core.jobs import NewJob, enqueue_many
from taskboard.core.kinds import builtin_registry

from tests.conftest import wait_for
from tests.faults.harness import SCRUBBED_ENV, spawn_worker

ROOT = Path(__file__).resolve().parents[2]
ROLE_SQL = ROOT / "docs" / "least-privilege.sql"
CLI = [sys.executable, "-m", "taskboard.core.cli"]


@pytest.fixture
def worker_url(db_url: str, pg_server_url: str) -> Iterator[str]:
    """`db_url` as a login role that is only a member of `taskboard_worker`."""
    role = f"tb_least_{secrets.token_hex(4)}"
    password = secrets.token_hex(8)
    with psycopg.connect(db_url, autocommit=True) as owner:
        owner.execute(ROLE_SQL.read_text().encode())
        owner.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE taskboard_worker").format(
            sql.Identifier(role), sql.Literal(password)))
    parts = urlsplit(db_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    try:
        yield urlunsplit(parts._replace(netloc=f"{role}:{password}@{host}"))
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


async def test_migrate_on_a_current_schema_needs_no_ddl_privilege(worker_url: str) -> None:
    """Every command (worker, enqueue, status) runs `migrate` first; on an up-to-date
    schema it must not try DDL the worker role may not run."""
    async with await psycopg.AsyncConnection.connect(worker_url, autocommit=True) as conn:
        assert await migrate(conn) == SCHEMA_VERSION


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    env["TASKBOARD_DATABASE_URL"] = url
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


async def _settled(url: str) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT kind, completed_at IS NOT NULL, failed_at IS NOT NULL, last_error"
            "  FROM taskboard_jobs ORDER BY id"
        )
        return [tuple(r) for r in await cur.fetchall()]


async def test_a_worker_under_the_least_privileged_role_completes_jobs(
    worker_url: str, tmp_path: Path
) -> None:
    jobs = [
        ("noop", {}),
        ("sleep", {"seconds": 0.05}),
        ("email", {"to": "maya@example.com", "subject": "Receipt", "text": "Thanks"}),
        ("billing", {"customer": "cus_maya", "amount": 1999, "currency": "usd"}),
        ("billing", {"customer": "cus_maya", "amount": 5, "currency": "usd",
                     "payment_method": "pm_card_chargeDeclined"}),
    ]
    # As the role: one job through the CLI, the rest through the library.
    proc = _cli(worker_url, "enqueue", "noop")
    assert proc.returncode == 0, proc.stderr[-2000:]
    async with await psycopg.AsyncConnection.connect(worker_url, autocommit=True) as conn:
        await enqueue_many(conn, builtin_registry(), [NewJob(k, p) for k, p in jobs[1:]])
    log = tmp_path / "worker.log"
    # No service settings: the worker starts its own SMTP sink and Stripe endpoint.
    worker = spawn_worker(worker_url, "lw", log, lease=2.0, pool_size=4, poll=0.5)
    try:
        async def done() -> bool:
            return all(completed or dead for _, completed, dead, _ in await _settled(worker_url))

        await wait_for(done, timeout=40, what="the jobs to settle under the worker role")
        status = _cli(worker_url, "status", "--json")
        assert status.returncode == 0, status.stderr[-2000:]
        assert json.loads(status.stdout)["counts"]["completed"] == 4
    finally:
        worker.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(worker.wait, 30)
    assert code == 0, log.read_text()[-3000:]
    rows = await _settled(worker_url)
    assert [r[1] for r in rows] == [True, True, True, True, False]
    assert rows[4][2] and "declined" in rows[4][3]  # failing is a write it may make too
    async with await psycopg.AsyncConnection.connect(worker_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT count(*) FROM taskboard_billing_charges")
        assert await cur.fetchone() == (1,)  # recorded in the completion transaction


@pytest.mark.parametrize(
    "statement",
    [
        "DROP TABLE taskboard_jobs",
        "TRUNCATE taskboard_attempts",
        "DELETE FROM taskboard_jobs",
        "DELETE FROM taskboard_billing_charges",
        "UPDATE taskboard_billing_charges SET amount = 0",
        "ALTER TABLE taskboard_jobs ADD COLUMN evil int",
        "CREATE TABLE evil (id int)",
        "DROP TABLE taskboard_schema",
        "UPDATE taskboard_schema SET version = 99",
        "CREATE ROLE evil",
    ],
)
async def test_the_worker_role_cannot_change_the_schema_or_delete(
    worker_url: str, statement: str
) -> None:
    async with await psycopg.AsyncConnection.connect(worker_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute(statement.encode())


def test_a_role_without_grants_gets_a_one_line_error(db_url: str, pg_server_url: str) -> None:
    """A database error after connecting (here: permission denied) is still one line on
    stderr and exit 2, like every other error of the CLI, never a traceback."""
    role = f"tb_none_{secrets.token_hex(4)}"
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    parts = urlsplit(db_url)
    url = urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rsplit('@', 1)[-1]}"))
    try:
        proc = _cli(url, "status")
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "permission denied" in lines[0]
