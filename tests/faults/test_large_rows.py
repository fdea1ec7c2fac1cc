"""Large rows never stall a queue (issue 22 item 6).

Every claim returns its payloads whole. Three rows of 150 MB written by hand made every
claim of their queue end in `statement_timeout`, for good: the job behind them never ran and
nothing was quarantined. Now enqueue refuses payloads over their kind's limit, the schema
refuses rows over its ceiling, a claim stops adding rows once their payloads reach its byte
budget, and a claim that times out is retried smaller down to one row, whose row is then
quarantined with its size named. The sizes here are smaller than 150 MB and the lease (hence
the worker's statement timeout, a sixth of it) short, so each case stays fast; what times
out, and why, is the same.
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path
from typing import Any

import psycopg
import pytest
from taskboard.core.base.errors import ConfigError, ValidationError
from taskboard.core.engine import leases
from taskboard.core.engine.claim_size import ClaimSizer
from taskboard.core.engine.events import Completed, Quarantined
from taskboard.core.engine.flights import ClaimPlan
from taskboard.core.engine.schema import MIGRATIONS
from taskboard.core.kinds import JobKind, KindRegistry, builtin_registry
from taskboard.core.kinds.email import MAX_BODY_BYTES
from taskboard.core.kinds.payload_rules import SCHEMA_PAYLOAD_CEILING
from taskboard.core.queue.jobs import NewJob, enqueue_many
from taskboard.core.standins.smtp_sink import SmtpSink

from tests.conftest import wait_for
from tests.faults.harness import spawn_worker
from tests.harness import Recorder, run_workers
from tests.test_cli import assert_one_line_error, run_cli

MiB = 1024 * 1024
# A repeated pattern: 40 MB of it takes ~0.25 s to read back as text here, past the
# 0.17 s statement timeout of a 1 s lease, and is stored compressed in ~0.5 MB.
PATTERN = "0123456789abcdef"


def _as_is(payload: Any) -> dict[str, Any]:
    return dict(payload)


async def _write_by_hand(
    conn: psycopg.AsyncConnection[Any], megabytes: int, *, measured: bool = False
) -> int:
    """One `noop` row of `megabytes` written past enqueue and past the schema's size trigger,
    as a row written before migration 10 was: its size unknown, or (`measured`) measured as
    that migration measures the rows already there."""
    async with conn.transaction():
        cur = await conn.execute(
            "SELECT 1 FROM pg_trigger WHERE tgname = 'taskboard_jobs_payload_size'"
        )
        trigger = await cur.fetchone() is not None
        if trigger:
            await conn.execute(
                "ALTER TABLE taskboard_jobs DISABLE TRIGGER taskboard_jobs_payload_size"
            )
        cur = await conn.execute(
            "INSERT INTO taskboard_jobs (kind, payload)"
            " SELECT 'noop', jsonb_build_object('blob', repeat(%s, %s)) RETURNING id",
            (PATTERN, megabytes * MiB // len(PATTERN)),
        )
        row = await cur.fetchone()
        assert row is not None
        if measured:
            await conn.execute(
                "UPDATE taskboard_jobs SET payload_bytes = octet_length(payload::text)"
                " WHERE id = %s",
                (row[0],),
            )
        if trigger:
            await conn.execute(
                "ALTER TABLE taskboard_jobs ENABLE TRIGGER taskboard_jobs_payload_size"
            )
    return int(row[0])


async def _fate(conn: psycopg.AsyncConnection[Any], job_id: int) -> tuple[Any, ...]:
    cur = await conn.execute(
        "SELECT completed_at IS NOT NULL, failed_at IS NOT NULL, last_error"
        "  FROM taskboard_jobs WHERE id = %s",
        (job_id,),
    )
    row = await cur.fetchone()
    assert row is not None
    return tuple(row)


# --- rows written by hand ----------------------------------------------------------------


async def test_big_rows_written_by_hand_are_quarantined_and_the_job_behind_them_runs(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    """Fails at 683562c: every claim takes all three rows and times out, for ever."""
    big = [await _write_by_hand(conn, 40) for _ in range(3)]
    [ordinary] = await enqueue_many(conn, builtin_registry(), [NewJob("noop")])
    rec = Recorder()
    async with run_workers(db_url, "lw", recorder=rec, lease_seconds=1.0, pool_size=4):
        await wait_for(lambda: rec.of(Completed, job_id=ordinary), timeout=30,
                       what="the ordinary job behind the big rows to complete")
        await wait_for(lambda: {e.job_id for e in rec.of(Quarantined)} >= set(big),
                       timeout=20, what="each big row to be quarantined")
    for job_id in big:
        completed, dead, error = await _fate(conn, job_id)
        assert (completed, dead) == (False, True)
        # Its size as stored: written with the trigger off, its text size was never known.
        assert error.startswith("quarantined: claiming it alone times out; its payload takes")
        assert " bytes as stored" in error


async def test_a_row_over_the_ceiling_from_before_the_limit_is_buried_by_the_claim(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    """A row over the schema's ceiling already in the table when migration 10 ran (measured by
    it, not refused): the first claim that meets it makes it dead, its size named, without
    ever returning its payload."""
    oversized = await _write_by_hand(conn, 17, measured=True)
    [ordinary] = await enqueue_many(conn, builtin_registry(), [NewJob("noop")])
    rec = Recorder()
    async with run_workers(db_url, "cw", recorder=rec, lease_seconds=1.0, pool_size=4):
        await wait_for(lambda: rec.of(Completed, job_id=ordinary), timeout=15,
                       what="the ordinary job to complete")
    completed, dead, error = await _fate(conn, oversized)
    assert (completed, dead) == (False, True)
    size = len(json.dumps({"blob": PATTERN * (17 * MiB // len(PATTERN))}))
    assert error == (
        f"quarantined: its payload of {size} bytes is over the ceiling of "
        f"{SCHEMA_PAYLOAD_CEILING} bytes; no claim returns it"
    )


async def test_the_schema_refuses_a_payload_over_its_ceiling_and_measures_the_others(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    with pytest.raises(psycopg.errors.ProgramLimitExceeded) as refused:
        await conn.execute(
            "INSERT INTO taskboard_jobs (kind, payload)"
            " SELECT 'noop', jsonb_build_object('blob', repeat('x', %s))",
            (SCHEMA_PAYLOAD_CEILING,),
        )
    assert refused.value.diag.message_primary == (
        f"payload of a 'noop' job is {SCHEMA_PAYLOAD_CEILING + 12} bytes, "
        f"over the ceiling of {SCHEMA_PAYLOAD_CEILING} bytes"
    )
    # A size written by hand is measured again, so a claim's budget can trust it.
    cur = await conn.execute(
        "INSERT INTO taskboard_jobs (kind, payload, payload_bytes)"
        " VALUES ('noop', '{\"a\": [1, 2]}', 1) RETURNING id, payload_bytes"
    )
    row = await cur.fetchone()
    assert row is not None and row[1] == len('{"a": [1, 2]}')
    with pytest.raises(psycopg.errors.ProgramLimitExceeded):
        await conn.execute(
            "UPDATE taskboard_jobs SET payload = jsonb_build_object('blob', repeat('x', %s))"
            " WHERE id = %s",
            (SCHEMA_PAYLOAD_CEILING, row[0]),
        )


async def test_the_migration_measures_the_rows_already_there_and_refuses_none(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    """Run on a table as migration 6 left it: unfinished rows are measured (one over the
    ceiling too: refusing it would fail the upgrade), finished ones are left unmeasured."""
    [migration] = [m for m in MIGRATIONS if "CREATE FUNCTION taskboard_payload_size" in m]
    await conn.execute("DROP TRIGGER taskboard_jobs_payload_size ON taskboard_jobs")
    await conn.execute("DROP FUNCTION taskboard_payload_size()")
    await conn.execute("ALTER TABLE taskboard_jobs DROP COLUMN payload_bytes")
    cur = await conn.execute(
        "INSERT INTO taskboard_jobs (kind, payload, completed_at)"
        " SELECT 'noop', jsonb_build_object('blob', repeat('x', n)), done"
        "   FROM (VALUES (3, NULL::timestamptz), (17 * 1048576, NULL), (5, now())) v(n, done)"
        " RETURNING id"
    )
    ids = [row[0] for row in await cur.fetchall()]
    await conn.execute(migration.encode())
    cur = await conn.execute(
        "SELECT payload_bytes FROM taskboard_jobs WHERE id = ANY(%s) ORDER BY id", (ids,)
    )
    assert [row[0] for row in await cur.fetchall()] == [15, 17 * MiB + 12, None]


# --- claims bounded by bytes -------------------------------------------------------------


async def test_a_claim_takes_rows_while_their_payloads_fit_its_byte_budget(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    registry = KindRegistry()
    registry.register(JobKind("blob", _as_is, handler=_noop, max_payload_bytes=2 * MiB))
    ids = await enqueue_many(
        conn, registry, [NewJob("blob", {"b": "x" * (MiB - 20)}) for _ in range(6)]
    )
    args: dict[str, Any] = {"worker_id": "w", "lease_seconds": 30, "queues": ["default"],
                            "kinds": ["blob"]}
    # Rows while the bytes before them are under 2.5 MiB: three of the six.
    got = await leases.claim(conn, limit=10, max_bytes=5 * MiB // 2, **args)
    assert [j.id for j in got] == ids[:3]
    # A budget smaller than one row still takes that row: a row is never stuck behind it.
    got = await leases.claim(conn, limit=10, max_bytes=1, **args)
    assert [j.id for j in got] == ids[3:4]


async def _noop(ctx: Any) -> None:
    return None


def test_a_claim_that_times_out_is_retried_smaller_down_to_one_row() -> None:
    sizer = ClaimSizer(8 * MiB)
    plan = ClaimPlan(100, 8, ["noop"], ["billing"], False, 8 * MiB)
    assert sizer.fit(plan) == plan
    assert not sizer.timed_out(sizer.fit(plan))
    smaller = sizer.fit(plan)
    assert (smaller.limit, smaller.db_limit, smaller.max_bytes) == (12, 8, MiB)
    assert sizer.shrunk
    assert not sizer.timed_out(smaller)
    assert sizer.fit(plan).limit == 1
    assert sizer.timed_out(sizer.fit(plan))  # one row timed out: probe it
    sizer.answered()
    assert sizer.fit(plan).limit == 12
    sizer.answered()
    assert sizer.fit(plan) == plan and not sizer.shrunk


# --- enqueue limits ----------------------------------------------------------------------


async def test_enqueue_over_the_limit_is_refused_in_one_line_and_writes_nothing(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    registry = KindRegistry()
    registry.register(JobKind("blob", _as_is))
    registry.register(JobKind("tiny", _as_is, max_payload_bytes=4096))
    with pytest.raises(ValidationError) as refused:
        await enqueue_many(conn, registry, [NewJob("blob", {"b": "x" * MiB})])
    assert str(refused.value) == (
        f"payload: is {MiB + 8} bytes, over the limit of {MiB} bytes for kind 'blob'"
    )
    with pytest.raises(ValidationError) as refused:
        await enqueue_many(conn, registry, [NewJob("tiny", {"b": "x" * 4000}),
                                            NewJob("tiny", {"b": "é" * 2100})])
    assert str(refused.value) == (
        "jobs[1]: payload: is 4208 bytes, over the limit of 4096 bytes for kind 'tiny'"
    )
    cur = await conn.execute("SELECT count(*) FROM taskboard_jobs")
    assert await cur.fetchone() == (0,)
    # At the limit exactly: accepted.
    await enqueue_many(conn, registry, [NewJob("tiny", {"b": "x" * (4096 - 8)})])


def test_the_payload_limit_is_configured_per_kind_per_registry_or_by_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert KindRegistry().payload_limit("anything") == MiB
    assert KindRegistry(max_payload_bytes=2048).payload_limit("anything") == 2048
    monkeypatch.setenv("TASKBOARD_MAX_PAYLOAD_BYTES", "65536")
    registry = KindRegistry()
    registry.register(JobKind("big", _as_is, max_payload_bytes=4 * MiB))
    assert registry.payload_limit("other") == 65536
    assert registry.payload_limit("big") == 4 * MiB
    assert builtin_registry().payload_limit("email") == 3 * MiB
    for bad in ("lots", "0", str(9 * MiB)):
        monkeypatch.setenv("TASKBOARD_MAX_PAYLOAD_BYTES", bad)
        with pytest.raises(ConfigError, match="TASKBOARD_MAX_PAYLOAD_BYTES must be"):
            KindRegistry()
    with pytest.raises(ConfigError, match="kind 'x': max_payload_bytes must be between"):
        JobKind("x", _as_is, max_payload_bytes=16 * MiB)


async def test_emails_at_their_body_limits_fit_and_more_is_refused(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    """Both bodies at 1 MiB fit the email kind's 3 MiB; bodies JSON must escape throughout
    (every character a quote: two bytes each) do not."""
    registry = builtin_registry()
    ok = {"to": "a@example.com", "subject": "s", "text": "t" * MAX_BODY_BYTES,
          "html": "h" * MAX_BODY_BYTES}
    await enqueue_many(conn, registry, [NewJob("email", ok)])
    quoted = {**ok, "text": '"' * MAX_BODY_BYTES, "html": '"' * MAX_BODY_BYTES}
    with pytest.raises(ValidationError, match=r"over the limit of 3145728 bytes for kind 'email'"):
        await enqueue_many(conn, registry, [NewJob("email", quoted)])


def test_cli_enqueue_over_the_limit_exits_2_in_one_line(db_url: str) -> None:
    payload = {"customer": "cus_1", "amount": 100, "currency": "usd",
               "description": "€" * 1000}
    proc = run_cli(db_url, "enqueue", "billing", "--payload", json.dumps(payload,
                   ensure_ascii=False), env={"TASKBOARD_MAX_PAYLOAD_BYTES": "2048"})
    assert_one_line_error(proc, "payload: is 3", "over the limit of 2048 bytes",
                          "for kind 'billing'")
    proc = run_cli(db_url, "enqueue", "billing", "--payload", json.dumps(payload,
                   ensure_ascii=False))
    assert proc.returncode == 0, proc.stderr


# --- many emails near their limit --------------------------------------------------------


async def test_a_hundred_emails_near_their_limit_complete_without_a_claim_timing_out(
    db_url: str, conn: psycopg.AsyncConnection[Any], tmp_path: Path
) -> None:
    """Fails at 683562c: one claim of all hundred (200 MB) runs out the statement timeout,
    again and again (9 times in a row at a 10 s lease in the issue; here, at a 5 s lease,
    no email was sent in 90 s). Now each claim brings one email back. On an idle machine no
    claim times out; with the cores shared by several test runs (load average 7), one in
    four runs saw one or two, and with a soak beside them five, which the claims then shrank
    past: up to one in ten of the hundred claims is tolerated (the old code completed none)."""
    # Text that compresses poorly, as real mail does: the database stores it whole.
    rng = random.Random(22)
    body = "".join(rng.choices(string.ascii_letters + "     .,", k=MAX_BODY_BYTES - 64))
    ids: list[int] = []
    for batch in range(10):  # one statement of 200 MB takes longer than ten of 20
        ids += await enqueue_many(conn, builtin_registry(), [
            NewJob("email", {"to": "a@example.com", "subject": f"n{batch}.{i}", "text": body,
                             "html": body})
            for i in range(10)
        ])
    log = tmp_path / "worker.log"
    async with SmtpSink() as sink:
        proc = spawn_worker(db_url, "ew", log, lease=5.0, pool_size=4,
                            env={"TASKBOARD_SMTP_URL": f"smtp://{sink.host}:{sink.port}"})
        try:
            async def all_done() -> bool:
                cur = await conn.execute(
                    "SELECT count(*) FROM taskboard_jobs WHERE id = ANY(%s)"
                    " AND completed_at IS NOT NULL", (ids,))
                row = await cur.fetchone()
                return bool(row and row[0] == len(ids))

            await wait_for(all_done, timeout=90, step=0.2, what="all 100 emails completed")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    timeouts = [d for d in lines if d.get("role") == "claims"
                or "CLAIM" in str(d.get("statement"))]
    assert len(timeouts) <= 10, timeouts
    cur = await conn.execute("SELECT count(*) FROM taskboard_jobs WHERE failed_at IS NOT NULL")
    assert await cur.fetchone() == (0,)
