"""`docs/least-privilege.sql` says exactly what its role can do; these tests hold it to that
against the real server.

- Every statement of `taskboard.core.sql` runs under the role, except the few the
  doc says it must not (migrations, the stand-ins' registry); a `taskboard worker` under
  the role completes noop, sleep, email and billing jobs, and `status`, `enqueue`,
  `retry`, `cancel`, `history` and a drain request work under it.
- The role's grants, column by column: SELECT, INSERT and UPDATE of every column of every
  Taskboard table, row locks, and LOCK TABLE in every mode are allowed exactly as the doc's
  table says, refused (InsufficientPrivilege) everywhere else. No DELETE, TRUNCATE, DDL,
  TEMP, functions, sequences, or CREATE in any schema.
- What the doc lists as still possible is possible (so the list stays honest).
- The script converges from the widest older grants (and `public` as PostgreSQL <= 14 left
  it), can be run again, and its final check fails when a grant elsewhere undoes it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb
from taskboard.core import sql as engine_sql
from taskboard.core.engine.schema import SCHEMA_VERSION, migrate
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue_many
from taskboard.core.view.operator import request_drain

from tests.conftest import wait_for
from tests.faults.harness import SCRUBBED_ENV, spawn_worker

ROOT = Path(__file__).resolve().parents[2]
ROLE_SQL = ROOT / "docs" / "least-privilege.sql"
CLI = [sys.executable, "-m", "taskboard.core.cli"]

# What the doc grants, as its table says. Everything not listed here is refused.
SELECT_TABLES = frozenset({
    "taskboard_jobs", "taskboard_attempts", "taskboard_workers", "taskboard_billing_charges",
    "taskboard_schema", "taskboard_installation", "taskboard_finished_counts",
    "taskboard_waiting_counts", "taskboard_queues", "taskboard_schedules",
    "taskboard_email_sends", "taskboard_job_actions", "taskboard_steps",
    "taskboard_job_parents", "taskboard_kind_limits",
})
INSERT_COLUMNS: dict[str, frozenset[str]] = {
    "taskboard_jobs": frozenset({"kind", "payload", "queue", "priority", "run_at",
                                 "max_attempts", "timeout_seconds", "unique_key",
                                 "traceparent", "tracestate"}),
    "taskboard_attempts": frozenset({"job_id", "attempt", "lease_token", "worker_id",
                                     "claimed_at", "pickup_seconds", "outcome", "ended_at",
                                     "error", "renewal_failed_at", "superseded_at",
                                     "handler_seconds", "min_margin_seconds"}),
    "taskboard_workers": frozenset({"id", "host", "pid", "queues", "kinds", "lease_seconds",
                                    "capacity", "pool_max"}),
    "taskboard_billing_charges": frozenset({"job_id", "payment_intent_id", "amount",
                                            "currency", "customer", "attempt", "worker_id",
                                            "status"}),
    "taskboard_email_sends": frozenset({"job_id", "attempt", "message_id", "recipient",
                                        "worker_id"}),
    "taskboard_job_actions": frozenset({"job_id", "action", "detail"}),
    "taskboard_queues": frozenset({"name", "paused_at", "reason"}),
    "taskboard_kind_limits": frozenset({"kind", "max_running", "rate_per_second"}),
    "taskboard_schedules": frozenset({"name", "cron", "kind", "payload", "queue", "priority",
                                      "max_attempts", "timeout_seconds", "tz", "traceparent",
                                      "tracestate"}),
    "taskboard_steps": frozenset({"job_id", "name", "outcome", "result", "attempt",
                                  "worker_id"}),
    "taskboard_job_parents": frozenset({"child_id", "parent_id"}),
}
UPDATE_COLUMNS: dict[str, frozenset[str]] = {
    "taskboard_jobs": frozenset({"lease_token", "lease_expires_at", "claimed_by", "claimed_at",
                                 "attempts", "claim_count", "run_at", "completed_at",
                                 "failed_at", "cancelled_at", "last_error", "snoozes",
                                 "traceparent", "tracestate",
                                 "result", "waiting_on", "wait_run_at", "has_children"}),
    "taskboard_attempts": frozenset({"outcome", "ended_at", "error", "renewal_failed_at",
                                     "superseded_at", "handler_seconds",
                                     "min_margin_seconds"}),
    "taskboard_workers": frozenset({"host", "pid", "started_at", "heartbeat_at", "stopped_at",
                                    "state", "pause_requested", "drain_requested", "queues",
                                    "kinds", "lease_seconds", "capacity", "in_flight",
                                    "renewals_ok", "renewals_failed", "pool_max",
                                    "pool_in_use", "pool_idle", "pool_waiting", "last_error",
                                    "last_error_at"}),
    "taskboard_queues": frozenset({"paused_at", "reason"}),
    "taskboard_schedules": frozenset({"cron", "kind", "payload", "queue", "priority",
                                      "max_attempts", "timeout_seconds", "last_slot", "tz",
                                      "revision", "disabled_at", "disabled_error",
                                      "traceparent", "tracestate"}),
    "taskboard_billing_charges": frozenset({"status"}),
    "taskboard_kind_limits": frozenset({"max_running", "rate_per_second", "recent",
                                        "updated_at"}),
}
LOCK_MODES = ("ACCESS SHARE", "ROW SHARE", "ROW EXCLUSIVE", "SHARE UPDATE EXCLUSIVE", "SHARE",
              "SHARE ROW EXCLUSIVE", "EXCLUSIVE", "ACCESS EXCLUSIVE")
ROW_LOCKS = ("UPDATE", "NO KEY UPDATE", "SHARE", "KEY SHARE")

# Statements of the engine the role must not run: the owner migrates and makes and resets
# the demo's database, and the embedded default's stand-ins registry is not the production
# worker's business.
REFUSED_STATEMENTS = frozenset({
    "CREATE_SCHEMA_TABLE", "RECORD_MIGRATION", "FIND_STANDIN", "REGISTER_STANDIN",
    "FORGET_STANDIN", "REMOVE_SCHEDULE", "DEMO_RESET", "CREATE_DEMO_DATABASE",
    "CREATE_ROOM_DATABASE",
})
# Statements PostgreSQL refuses inside a transaction block: run on their own.
OUTSIDE_TRANSACTION = frozenset({"CREATE_DEMO_DATABASE", "CREATE_ROOM_DATABASE",
                                 "DROP_ROOM_DATABASE"})
# A training room's database name is composed into its statement as an identifier (`{}`):
# a room that does not exist (DROP ... IF EXISTS of it is a notice for anyone).
ROOM_SAMPLE = '"taskboard_demo_probe_room"'
ROOM_TEMPLATES = frozenset({"CREATE_ROOM_DATABASE", "DROP_ROOM_DATABASE"})

# Older, wider grants and PostgreSQL <= 14's `public`: the script must take all of it back.
WIDE_OPEN = b"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'taskboard_worker') THEN
        CREATE ROLE taskboard_worker NOLOGIN;
    END IF;
    EXECUTE format('GRANT ALL ON DATABASE %I TO taskboard_worker', current_database());
    EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO PUBLIC', current_database());
END
$$;
GRANT CREATE ON SCHEMA public TO PUBLIC;
GRANT ALL ON ALL TABLES IN SCHEMA public TO taskboard_worker;
GRANT INSERT (id, created_at), UPDATE (id, kind, payload) ON taskboard_jobs TO taskboard_worker;
GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO taskboard_worker;
"""


@pytest.fixture
def worker_url(db_url: str, pg_server_url: str) -> Iterator[str]:
    """`db_url` as a login role that is only a member of `taskboard_worker`, made by the
    script (run twice) on a database where everything was granted before."""
    role = f"tb_least_{secrets.token_hex(4)}"
    password = secrets.token_hex(8)
    with psycopg.connect(db_url, autocommit=True) as owner:
        owner.execute(WIDE_OPEN)
        owner.execute(ROLE_SQL.read_bytes())
        owner.execute(ROLE_SQL.read_bytes())
        owner.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE taskboard_worker").format(
            sql.Identifier(role), sql.Literal(password)))
    parts = urlsplit(db_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    try:
        yield urlunsplit(parts._replace(netloc=f"{role}:{password}@{host}"))
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    env["TASKBOARD_DATABASE_URL"] = url
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


async def _outcome(conn: psycopg.AsyncConnection[Any], statement: Any,
                   params: Any = None) -> str:
    """'allowed', 'refused' (a privilege error) or the other error; always rolled back."""
    try:
        await conn.execute(statement, params)
        return "allowed"
    except psycopg.errors.InsufficientPrivilege:
        return "refused"
    except psycopg.Error as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    finally:
        await conn.rollback()


def _mismatches(expected: dict[str, str], actual: dict[str, str]) -> list[str]:
    return [f"{key}: expected {want}, got {actual.get(key)}"
            for key, want in expected.items() if actual.get(key) != want]


# --- the role does its job -------------------------------------------------------------


async def test_migrate_on_a_current_schema_needs_no_ddl_privilege(worker_url: str) -> None:
    """Every command (worker, enqueue, status) runs `migrate` first; on an up-to-date
    schema it must not try DDL the worker role may not run."""
    async with await psycopg.AsyncConnection.connect(worker_url, autocommit=True) as conn:
        assert await migrate(conn) == SCHEMA_VERSION


async def test_a_pending_migration_is_refused_not_half_applied(
    worker_url: str, db_url: str
) -> None:
    """The owner migrates: with a migration pending, the role fails on the first DDL (one
    line, exit 2) and the whole migration rolls back."""
    with psycopg.connect(db_url, autocommit=True) as owner:
        owner.execute("DELETE FROM taskboard_schema WHERE version = %s", (SCHEMA_VERSION,))
    proc = _cli(worker_url, "migrate")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "permission denied for schema public" in proc.stderr, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    with psycopg.connect(db_url, autocommit=True) as owner:
        row = owner.execute("SELECT max(version) FROM taskboard_schema").fetchone()
    assert row == (SCHEMA_VERSION - 1,)


def _leased_job(db_url: str, worker: str) -> tuple[int, uuid.UUID]:
    """As the owner: a running worker's row and a job it holds (with its attempt)."""
    token = uuid.uuid4()
    with psycopg.connect(db_url, autocommit=True) as owner:
        owner.execute(
            "INSERT INTO taskboard_workers (id, host, pid, lease_seconds, capacity)"
            " VALUES (%s, 'host-1', 1, 30, 1)", (worker,))
        row = owner.execute(
            "INSERT INTO taskboard_jobs (kind, lease_token, lease_expires_at, claimed_by,"
            " claimed_at, attempts, claim_count)"
            " VALUES ('noop', %s, now() + interval '1 hour', %s, now(), 1, 1) RETURNING id",
            (token, worker),
        ).fetchone()
        assert row is not None
        owner.execute(
            "INSERT INTO taskboard_attempts (job_id, attempt, lease_token, worker_id, claimed_at)"
            " VALUES (%s, 1, %s, %s, now())", (row[0], token, worker))
    return int(row[0]), token


NEEDS_PG_STAT_STATEMENTS = frozenset({"CLAIM_TIMING"})
"""Read only where the extension is installed (core/view/health.py asks first, and says so when
it is not); the test server has none."""


def _sample_params(job_id: int, token: uuid.UUID) -> dict[str, Any]:
    """A value for every parameter name the engine's statements use (add one here when a
    statement gains a parameter)."""
    return {
        "id": job_id, "token": token, "ids": [job_id], "tokens": [token], "reasons": ["probe"],
        "started": [False], "only": [job_id], "skip": [], "queues": ["default"],
        "kinds": ["noop"], "limit": 10, "lease": 30.0, "worker": "probe", "error": "probe",
        "permanent": False, "backoff": 1.0, "statement_timeout": "5s", "lock_timeout": "1s",
        "state": "running", "in_flight": 0, "renewals_ok": 0, "renewals_failed": 0,
        "pool_max": 1, "pool_in_use": 0, "pool_idle": 0, "pool_waiting": 0,
        "last_error": None, "host": "probe-host", "pid": 1, "capacity": 1,
        "keep_stopped": 60.0, "gone_after": 30.0, "pause": True, "job_id": job_id,
        "payment_intent": "pi_probe", "amount": 1, "currency": "usd", "customer": "cus_probe",
        "payloads": [Jsonb({})], "priorities": [0], "run_ats": [None], "max_attempts": [5],
        "v": SCHEMA_VERSION + 1, "name": "smtp", "address": "127.0.0.1:1",
        "timeouts": [None], "kind": "noop", "payload": Jsonb({}), "queue": "default",
        "priority": 0, "run_at": None, "timeout": None, "key": "probe-key", "reason": "probe",
        "cron": "* * * * *", "slot": datetime.now(UTC), "seconds": 1.0, "completed": 86400.0,
        "revision": 1, "tz": "UTC",
        "dead": 86400.0, "cancelled": 86400.0, "batch": 10, "age": 86400.0,
        "durations": [0.1], "margins": [None], "took": 0.1, "margin": None,
        "wake": ["default"], "keys": ["probe-key"],
        "db_kinds": [], "db_limit": 0, "window": 10.0, "needle": "probe", "like": "%probe%",
        "cap": 100,
        "attempt": 1, "worker_id": "probe", "status": "succeeded", "message_id": "<probe@x>",
        "recipients": ["probe@example.com"],
        "lease_kinds": [], "kind_leases": [], "leases": [None], "limited": [],
        "limited_wait": 0.1, "running": [None], "rates": [None],
        "result": '"probe"', "children": [job_id], "parents": [job_id],
        "names": ["probe"], "results": ['"probe"'], "attempts": [1],
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "tracestate": "probe=1",
        "max_bytes": 2 * 1024 * 1024,
        "detail": "probe", "since": None, "until": datetime.now(UTC), "after": 0, "shown": 10,
    }


def _engine_statements() -> dict[str, str]:
    return {name: value for name, value in vars(engine_sql).items()
            if name.isupper() and not name.startswith("_") and isinstance(value, str)}


async def test_every_engine_statement_runs_under_the_role(
    worker_url: str, db_url: str
) -> None:
    """The grants are derived from the SQL: every statement of `taskboard.core.sql`
    runs under the role (in a transaction rolled back after it) against a leased job, and
    only the migration and stand-ins statements are refused."""
    job_id, token = _leased_job(db_url, "probe")
    samples = _sample_params(job_id, token)
    statements = _engine_statements()
    assert "CLAIM" in statements and "REGISTER_WORKER" in statements
    actual: dict[str, str] = {}
    async with await psycopg.AsyncConnection.connect(worker_url) as conn:
        for name, text in sorted(statements.items()):
            if name in NEEDS_PG_STAT_STATEMENTS:
                continue
            names = set(re.findall(r"%\((\w+)\)s", text))
            missing = names - samples.keys()
            assert not missing, f"{name}: add sample values for {sorted(missing)}"
            params = {key: samples[key] for key in names}
            if "unnest" not in text and "max_attempts" in params:
                params["max_attempts"] = 5  # one job, not a batch's array
            if "taskboard_workers" in text and "taskboard_jobs" not in text:
                params = {**params, "id": "probe"} if "id" in params else params
            if name in ROOM_TEMPLATES:
                text = text.format(ROOM_SAMPLE)
            await conn.set_autocommit(name in OUTSIDE_TRANSACTION)
            actual[name] = await _outcome(conn, text, params or None)
    expected = {name: "refused" if name in REFUSED_STATEMENTS else "allowed"
                for name in statements if name not in NEEDS_PG_STAT_STATEMENTS}
    assert not _mismatches(expected, actual), "\n".join(_mismatches(expected, actual))


async def _settled(url: str) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT kind, completed_at IS NOT NULL, failed_at IS NOT NULL, last_error"
            "  FROM taskboard_jobs ORDER BY id"
        )
        return [tuple(r) for r in await cur.fetchall()]


async def test_a_worker_and_the_cli_under_the_least_privileged_role(
    worker_url: str, tmp_path: Path
) -> None:
    jobs = [
        ("sleep", {"seconds": 0.05}),
        ("email", {"to": "maya@example.com", "subject": "Receipt", "text": "Thanks"}),
        ("billing", {"customer": "cus_maya", "amount": 1999, "currency": "usd"}),
        ("billing", {"customer": "cus_maya", "amount": 5, "currency": "usd",
                     "payment_method": "pm_card_chargeDeclined"}),
    ]
    # As the role: jobs through the CLI (one cancelled and retried) and the library.
    proc = _cli(worker_url, "enqueue", "noop")
    assert proc.returncode == 0, proc.stderr[-2000:]
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    proc = _cli(worker_url, "enqueue", "noop", "--run-at", later)
    assert proc.returncode == 0, proc.stderr[-2000:]
    scheduled = proc.stdout.strip()
    for command in ("cancel", "retry"):
        proc = _cli(worker_url, command, scheduled)
        assert proc.returncode == 0, proc.stderr[-2000:]
    async with await psycopg.AsyncConnection.connect(worker_url, autocommit=True) as conn:
        ids = await enqueue_many(conn, builtin_registry(), [NewJob(k, p) for k, p in jobs])
    log = tmp_path / "worker.log"
    # No service settings: the worker starts its own SMTP sink and Stripe endpoint, without
    # the stand-ins registry (the role may not read it).
    worker = spawn_worker(worker_url, "lw", log, lease=2.0, pool_size=4, poll=0.5)
    try:
        async def done() -> bool:
            return all(completed or dead for _, completed, dead, _ in await _settled(worker_url))

        await wait_for(done, timeout=40, what="the jobs to settle under the worker role")
        status = _cli(worker_url, "status", "--json")
        assert status.returncode == 0, status.stderr[-2000:]
        counts = json.loads(status.stdout)["counts"]
        assert (counts["completed"], counts["dead"]) == (5, 1), counts
        history = _cli(worker_url, "history", str(ids[-1]), "--json")
        assert history.returncode == 0, history.stderr[-2000:]
        assert [a["outcome"] for a in json.loads(history.stdout)["attempts"]] == ["failed"]
        # The dashboard's drain, sent as the role: the worker stops by itself.
        async with await psycopg.AsyncConnection.connect(worker_url, autocommit=True) as conn:
            await request_drain(conn, "lw")
        code = await asyncio.to_thread(worker.wait, 30)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            await asyncio.to_thread(worker.wait, 30)
    text = log.read_text()
    assert code == 0, text[-3000:]
    # Roles retry failed statements: a privilege error anywhere would only show in the log.
    # The one expected: the stand-ins registry, which the worker does without.
    denied = [line for line in text.splitlines() if "permission denied" in line]
    assert all("taskboard_standins" in line for line in denied), "\n".join(denied)
    rows = await _settled(worker_url)
    assert [r[1] for r in rows] == [True, True, True, True, True, False]
    assert rows[5][2] and "declined" in rows[5][3]  # failing is a write it may make too
    async with await psycopg.AsyncConnection.connect(worker_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT count(*) FROM taskboard_billing_charges")
        assert await cur.fetchone() == (1,)  # recorded in the completion transaction
        cur = await conn.execute("SELECT state FROM taskboard_workers WHERE id = 'lw'")
        assert await cur.fetchone() == ("stopped",)


# --- and nothing more --------------------------------------------------------------------


async def _taskboard_columns(conn: psycopg.AsyncConnection[Any]) -> dict[str, list[
        tuple[str, bool]]]:
    """Each Taskboard table's columns, with whether the column is GENERATED ALWAYS."""
    cur = await conn.execute(
        "SELECT c.relname, a.attname, a.attidentity = 'a'"
        "  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid"
        " WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'"
        "   AND c.relname LIKE 'taskboard\\_%' AND a.attnum > 0 AND NOT a.attisdropped"
        " ORDER BY c.relname, a.attnum"
    )
    tables: dict[str, list[tuple[str, bool]]] = {}
    for table, column, always in await cur.fetchall():
        tables.setdefault(table, []).append((column, always))
    return tables


async def test_the_grants_are_exactly_the_documented_ones(worker_url: str) -> None:
    """Every column of every Taskboard table: SELECT, INSERT and UPDATE allowed exactly where
    the doc grants them; row locks only where a column may be updated; LOCK TABLE only in
    ACCESS SHARE (what any SELECT takes); DELETE, TRUNCATE, DDL and maintenance nowhere."""
    expected: dict[str, str] = {}
    actual: dict[str, str] = {}
    async with await psycopg.AsyncConnection.connect(worker_url) as conn:
        tables = await _taskboard_columns(conn)
        await conn.rollback()
        assert set(SELECT_TABLES) | {"taskboard_standins", "taskboard_fences"} == set(tables)

        async def check(statement: sql.Composable, allowed: bool) -> None:
            key = statement.as_string(conn)
            expected[key] = "allowed" if allowed else "refused"
            actual[key] = await _outcome(conn, statement)

        for name, columns in tables.items():
            table = sql.Identifier(name)
            for column, always in columns:
                col = sql.Identifier(column)
                await check(sql.SQL("SELECT {} FROM {} LIMIT 0").format(col, table),
                            name in SELECT_TABLES)
                overriding = sql.SQL(" OVERRIDING SYSTEM VALUE" if always else "")
                await check(sql.SQL("INSERT INTO {} ({}){} SELECT NULL WHERE false").format(
                    table, col, overriding), column in INSERT_COLUMNS.get(name, ()))
                value = sql.SQL("DEFAULT" if always else "NULL")
                await check(sql.SQL("UPDATE {} SET {} = {} WHERE false").format(
                    table, col, value), column in UPDATE_COLUMNS.get(name, ()))
            for lock in ROW_LOCKS:
                await check(sql.SQL("SELECT 1 FROM {} LIMIT 0 FOR " + lock).format(table),
                            name in UPDATE_COLUMNS)
            for mode in LOCK_MODES:
                await check(sql.SQL("LOCK TABLE {} IN " + mode + " MODE").format(table),
                            mode == "ACCESS SHARE" and name in SELECT_TABLES)
            first = sql.Identifier(columns[0][0])
            for ddl in ("DELETE FROM {}", "TRUNCATE {}", "ALTER TABLE {} ADD COLUMN evil int",
                        "ALTER TABLE {} DISABLE TRIGGER ALL", "DROP TABLE {}",
                        "REINDEX TABLE {}", "CREATE INDEX ON {} ({})",
                        "CREATE TRIGGER evil BEFORE INSERT ON {} FOR EACH ROW"
                        " EXECUTE FUNCTION suppress_redundant_updates_trigger()",
                        "COMMENT ON TABLE {} IS 'evil'"):
                await check(sql.SQL(ddl).format(table, first), False)
        cur = await conn.execute(
            "SELECT oid::regclass::text FROM pg_class"
            " WHERE relkind = 'S' AND relnamespace = 'public'::regnamespace")
        sequences = [r[0] for r in await cur.fetchall()]
        await conn.rollback()
        assert len(sequences) >= 2  # the identity sequences of jobs and attempts
        for seq in sequences:
            for call in ("nextval({})", "setval({}, 1)", "currval({})"):
                await check(sql.SQL("SELECT " + call).format(sql.Literal(seq)), False)
    assert not _mismatches(expected, actual), "\n".join(_mismatches(expected, actual))


REFUSED_ELSEWHERE = [
    "CREATE TEMP TABLE evil (id int)",
    "CREATE TEMPORARY TABLE evil AS SELECT * FROM taskboard_jobs",
    "CREATE TABLE pg_temp.evil (id int)",
    "CREATE FUNCTION pg_temp.evil() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE FUNCTION public.evil() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE FUNCTION evil() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE PROCEDURE evil() LANGUAGE sql AS 'SELECT 1'",
    "CREATE TABLE evil (id int)",
    "CREATE TABLE public.evil (id int)",
    "CREATE VIEW evil AS SELECT 1",
    "CREATE TYPE evil AS (id int)",
    "CREATE SEQUENCE evil",
    "CREATE SCHEMA evil",
    "DO $$ BEGIN CREATE TEMP TABLE evil (id int); END $$",
    "DROP SCHEMA public CASCADE",
    "CREATE ROLE evil",
    "ALTER ROLE taskboard_worker CREATEDB",
    "SET session_replication_role = replica",
    "COPY taskboard_jobs TO '/tmp/taskboard-evil'",
    "SELECT pg_read_file('postgresql.conf')",
]


async def test_the_role_is_refused_everything_else(worker_url: str, db_url: str) -> None:
    """No TEMP, no functions, no CREATE in any schema of the database, no roles, no server
    files, no switching off triggers and foreign keys, no server settings, no other role's
    sessions."""
    expected: dict[str, str] = {}
    actual: dict[str, str] = {}
    async with await psycopg.AsyncConnection.connect(worker_url) as conn:
        for statement in REFUSED_ELSEWHERE:
            expected[statement] = "refused"
            actual[statement] = await _outcome(conn, statement.encode())
        cur = await conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_temp\\_%'"
            "   AND nspname NOT LIKE 'pg\\_toast\\_temp\\_%'")
        schemas = [r[0] for r in await cur.fetchall()]
        await conn.rollback()
        assert {"public", "pg_catalog", "information_schema"} <= set(schemas)
        for schema in schemas:
            for make in ("CREATE TABLE {}.evil (id int)",
                         "CREATE FUNCTION {}.evil() RETURNS int LANGUAGE sql AS 'SELECT 1'"):
                statement = sql.SQL(make).format(sql.Identifier(schema))
                key = statement.as_string(conn)
                expected[key] = "refused"
                actual[key] = await _outcome(conn, statement)
        with psycopg.connect(db_url, autocommit=True) as owner:
            owner_pid = owner.info.backend_pid
            statement = f"SELECT pg_terminate_backend({owner_pid})"
            expected[statement] = "refused"
            actual[statement] = await _outcome(conn, statement.encode())
        await conn.set_autocommit(True)  # these two refuse to run in a transaction
        for statement in ("CREATE DATABASE evil", "ALTER SYSTEM SET max_connections = 1"):
            expected[statement] = "refused"
            actual[statement] = await _outcome(conn, statement.encode())
    assert not _mismatches(expected, actual), "\n".join(_mismatches(expected, actual))


# --- what the doc says remains -----------------------------------------------------------


async def test_what_the_doc_says_remains_is_possible(worker_url: str, db_url: str) -> None:
    """Each numbered item of the doc's "What the role can still do", as the role, in a
    transaction rolled back after it."""
    job, _ = _leased_job(db_url, "w1")
    remains = {
        "1 read payloads": "SELECT payload, kind FROM taskboard_jobs",
        "1 read billing": "SELECT * FROM taskboard_billing_charges",
        "1 read workers": "SELECT host, pid FROM taskboard_workers",
        "2 enqueue anything": "INSERT INTO taskboard_jobs (kind, payload, queue, priority,"
            " run_at, max_attempts) VALUES ('no-such-kind', '\"not an object\"', 'q',"
            " 2147483647, 'infinity', 1000000)",
        "3 rewrite a lease": f"UPDATE taskboard_jobs SET lease_token = gen_random_uuid(),"
            f" lease_expires_at = 'infinity', claimed_by = 'intruder', claimed_at = now()"
            f" WHERE id = {job}",
        "4 finish without running": "UPDATE taskboard_jobs SET completed_at = now(),"
            f" lease_token = NULL, lease_expires_at = NULL WHERE id = {job}",
        "4 delay and reset": "UPDATE taskboard_jobs SET run_at = 'infinity', attempts = 0,"
            f" claim_count = 0, last_error = 'x' WHERE id = {job}",
        "5 rewrite history": "UPDATE taskboard_attempts SET outcome = 'completed',"
            f" ended_at = now(), error = 'forged' WHERE job_id = {job}",
        "5 insert history": "INSERT INTO taskboard_attempts (job_id, attempt, lease_token,"
            f" worker_id, claimed_at) VALUES ({job}, 99, gen_random_uuid(), 'intruder', now())",
        "6 forge a billing record": "INSERT INTO taskboard_billing_charges (job_id,"
            f" payment_intent_id, amount, currency, customer) VALUES ({job}, 'pi_forged', 1,"
            " 'usd', 'cus_forged')",
        "7 fake worker": "INSERT INTO taskboard_workers (id, host, pid, queues, kinds,"
            " lease_seconds, capacity, pool_max) VALUES ('fake', 'h', 1, '{default}',"
            " '{billing}', 30, 1, 1)",
        "7 pause and drain any worker": "UPDATE taskboard_workers SET pause_requested = true,"
            " drain_requested = true, queues = '{nothing}', kinds = '{}' WHERE id = 'w1'",
        "8 row locks on jobs": "SELECT id FROM taskboard_jobs FOR UPDATE",
        "8 row locks on attempts": "SELECT id FROM taskboard_attempts FOR UPDATE",
        "8 row locks on workers": "SELECT id FROM taskboard_workers FOR UPDATE",
        "8 access share": "LOCK TABLE taskboard_jobs IN ACCESS SHARE MODE",
        "8 the migration lock": engine_sql.MIGRATION_LOCK,
        "8 any advisory lock": "SELECT pg_advisory_xact_lock(42)",
        "9 listen": "LISTEN taskboard_control",
        "9 notify workers": "NOTIFY taskboard_jobs, 'default'",
        "9 notify control": "SELECT pg_notify('taskboard_control', 'w1')",
        "10 long queries": "SELECT pg_sleep(0.01)",
        "10 session settings": "SET work_mem = '2GB'; SET statement_timeout = 0",
        "10 DO blocks": "DO $$ BEGIN PERFORM count(*) FROM taskboard_jobs; END $$",
        "10 large objects": "SELECT lo_from_bytea(0, '\\x00')",
    }
    actual: dict[str, str] = {}
    async with await psycopg.AsyncConnection.connect(worker_url) as conn:
        for item, statement in remains.items():
            actual[item] = await _outcome(conn, statement.encode())
        async with await psycopg.AsyncConnection.connect(worker_url) as other:
            pid = other.info.backend_pid
            actual["10 terminate its own sessions"] = await _outcome(
                conn, f"SELECT pg_terminate_backend({pid})".encode())
    expected = dict.fromkeys(actual, "allowed")
    assert not _mismatches(expected, actual), "\n".join(_mismatches(expected, actual))


# --- the script itself ---------------------------------------------------------------------


async def test_the_script_changes_the_database_defaults_it_says(worker_url: str,
                                                               db_url: str) -> None:
    """REVOKE CREATE ON SCHEMA public / TEMPORARY ON DATABASE FROM PUBLIC: every role without
    a grant of its own loses them (the doc says so), and the doc's GRANT gives them back."""
    role = f"tb_other_{secrets.token_hex(4)}"
    with psycopg.connect(db_url, autocommit=True) as owner:
        owner.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
        try:
            def can() -> tuple[bool, bool]:
                row = owner.execute(
                    "SELECT has_schema_privilege(%(r)s, 'public', 'CREATE'),"
                    "       has_database_privilege(%(r)s, current_database(), 'TEMPORARY')",
                    {"r": role}).fetchone()
                assert row is not None
                return bool(row[0]), bool(row[1])

            assert can() == (False, False)
            owner.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(
                sql.Identifier(role)))
            owner.execute(sql.SQL("GRANT TEMPORARY ON DATABASE {} TO {}").format(
                sql.Identifier(owner.info.dbname), sql.Identifier(role)))
            assert can() == (True, True)
        finally:
            owner.execute(sql.SQL("DROP OWNED BY {}; DROP ROLE {}").format(
                sql.Identifier(role), sql.Identifier(role)))


def test_the_script_fails_when_another_grant_undoes_it(db_url: str) -> None:
    """The final check of the script: a schema where PUBLIC may still CREATE (another
    application's) makes it fail, naming the schema, instead of leaving a wider role."""
    with psycopg.connect(db_url, autocommit=True) as owner:
        owner.execute("CREATE SCHEMA other_app")
        owner.execute("GRANT CREATE ON SCHEMA other_app TO PUBLIC")
        with pytest.raises(psycopg.errors.RaiseException, match="other_app"):
            owner.execute(ROLE_SQL.read_bytes())
        owner.execute("REVOKE CREATE ON SCHEMA other_app FROM PUBLIC")
        owner.execute(ROLE_SQL.read_bytes())


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
