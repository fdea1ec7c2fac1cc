"""Rows written into `taskboard_jobs` by hand, past enqueue's validation: wrong payload
shapes for each kind, payloads that are not objects, kinds no worker knows, and poison
rows that make the claim statement itself fail. A bad shape becomes a dead job with a
readable reason on its first claim; a kind nobody runs waits, untouched, for a worker that
knows it (and `status` says so); a poison row is quarantined (dead with the reason). The
worker never crashes, never stalls, and keeps working on the good jobs around them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool
from taskboard.core.engine import quarantine
from taskboard.core.engine.connection import HeldConnection, session_params
from taskboard.core.engine.events import Completed, Quarantined
from taskboard.core.view.status import read_board

from tests.conftest import wait_for
from tests.faults.harness import spawn_worker
from tests.harness import Recorder, run_workers

# (kind, payload as JSON text, what last_error must start with)
ROWS: list[tuple[str, str, str]] = [
    ("noop", '{"unexpected": 1}', "invalid payload: payload"),
    ("noop", "[]", "invalid payload: payload: must be a JSON object"),
    ("noop", "null", "invalid payload: payload: must be a JSON object"),
    ("sleep", '"soon"', "invalid payload: payload: must be a JSON object"),
    ("sleep", "42", "invalid payload: payload: must be a JSON object"),
    ("sleep", "{}", "invalid payload: seconds"),
    ("sleep", '{"seconds": -3}', "invalid payload: seconds"),
    ("sleep", '{"seconds": 1e400}', "invalid payload: seconds"),
    ("sleep", '{"seconds": true}', "invalid payload: seconds"),
    ("sleep", '{"seconds": "5"}', "invalid payload: seconds"),
    ("email", "true", "invalid payload: payload: must be a JSON object"),
    ("email", "{}", "invalid payload: to"),
    ("email", '{"to": 5, "subject": "x", "text": "y"}', "invalid payload: to"),
    ("email", '{"to": "a@example.com", "subject": "x\\r\\nBcc: all@example.com", "text": "y"}',
     "invalid payload: subject"),
    ("email", '{"to": "not an address", "subject": "x", "text": "y"}', "invalid payload: to"),
    ("billing", "[1, 2, 3]", "invalid payload: payload: must be a JSON object"),
    ("billing", '{"customer": "bob", "amount": 100, "currency": "usd"}',
     "invalid payload: customer"),
    ("billing", '{"customer": "cus_1", "amount": 1.5, "currency": "usd"}',
     "invalid payload: amount"),
    ("billing", '{"customer": "cus_1", "amount": 100, "currency": "zzz"}',
     "invalid payload: currency"),
    ("billing", '{"customer": "cus_1", "amount": 100, "currency": "usd", "extra": {}}',
     "invalid payload: payload: unknown fields"),
]
# Kinds no worker runs: during a rolling deploy an old worker meets jobs of a new kind.
UNKNOWN_KINDS = ["teleport", "", "NOOP", "noop ", "x" * 500]


async def _insert(conn: psycopg.AsyncConnection[Any], kind: str, payload: str) -> int:
    cur = await conn.execute(
        "INSERT INTO taskboard_jobs (kind, payload) VALUES (%s, %s::jsonb) RETURNING id",
        (kind, payload),
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def _state(conn: psycopg.AsyncConnection[Any], job_id: int) -> tuple[Any, ...]:
    cur = await conn.execute(
        "SELECT completed_at IS NOT NULL, failed_at IS NOT NULL, attempts, last_error"
        "  FROM taskboard_jobs WHERE id = %s",
        (job_id,),
    )
    row = await cur.fetchone()
    assert row is not None
    return tuple(row)


async def test_malformed_rows_become_dead_with_a_reason_and_the_worker_keeps_working(
    db_url: str, conn: psycopg.AsyncConnection[Any], tmp_path: Path
) -> None:
    bad = [await _insert(conn, kind, payload) for kind, payload, _ in ROWS]
    unknown = [await _insert(conn, kind, "{}") for kind in UNKNOWN_KINDS]
    good_before = await _insert(conn, "noop", "{}")
    log = tmp_path / "worker.log"
    proc = spawn_worker(db_url, "mw", log, lease=2.0, pool_size=5, poll=0.5)
    try:
        async def settled() -> bool:
            states = [await _state(conn, job_id) for job_id in [*bad, good_before]]
            return all(s[0] or s[1] for s in states)

        await wait_for(settled, timeout=30, what="every hand-written row to be settled")
        # Still working: a good job enqueued now completes too.
        good_after = await _insert(conn, "sleep", '{"seconds": 0.05}')

        async def done() -> bool:
            return bool((await _state(conn, good_after))[0])

        await wait_for(done, timeout=15, what="a good job after the bad rows")
        assert proc.poll() is None, "the worker process died"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 20)
    assert code == 0
    for job_id, (kind, payload, reason) in zip(bad, ROWS, strict=True):
        completed, dead, attempts, error = await _state(conn, job_id)
        assert dead and not completed, (kind, payload)
        assert attempts == 1, f"{kind} {payload}: a permanent error was retried"
        assert error and error.startswith(reason), (kind, payload, error)
        assert "Traceback" not in error and "\n" not in error
    for job_id, kind in zip(unknown, UNKNOWN_KINDS, strict=True):
        assert await _state(conn, job_id) == (False, False, 0, None), kind  # never claimed
    board = await read_board(conn, database="test", mode="attached")
    orphans = {(o.kind, o.queue): o.waiting for o in board.orphans}
    assert orphans == {(kind, "default"): 1 for kind in UNKNOWN_KINDS}
    assert (await _state(conn, good_before))[0]
    for line in log.read_text().splitlines():
        data = json.loads(line)
        assert data.get("level") not in ("error", "critical"), line


async def test_a_row_nested_too_deeply_to_decode_is_dead_and_claiming_goes_on(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    """Valid jsonb that Python's json module cannot load (it recurses per level): the claim
    that returns it must not take the claim loop down with it."""
    deep = await _insert(conn, "noop", "[" * 5000 + "]" * 5000)
    good = await _insert(conn, "noop", "{}")
    rec = Recorder()
    async with run_workers(db_url, "dw", recorder=rec, lease_seconds=1.0, pool_size=4):
        await wait_for(lambda: rec.of(Completed, job_id=good), timeout=10,
                       what="the good job claimed alongside the deep one")
        later = await _insert(conn, "noop", "{}")
        await wait_for(lambda: rec.of(Completed, job_id=later), timeout=10,
                       what="a job enqueued after the deep one")

        async def deep_dead() -> bool:
            return bool((await _state(conn, deep))[1])

        await wait_for(deep_dead, timeout=10, what="the deep row to be dead")
    _, _, _, error = await _state(conn, deep)
    assert error and "\n" not in error


async def test_a_row_whose_claim_overflows_is_buried_and_the_queue_moves(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    """attempts = 2^31-1 by hand: `attempts + 1` in the claim overflowed, the whole claim
    failed on every try, and every worker on the queue claimed nothing, silently."""
    cur = await conn.execute(
        "INSERT INTO taskboard_jobs (kind, payload, attempts) VALUES ('noop', '{}', 2147483647)"
        " RETURNING id"
    )
    poison = (await cur.fetchone())[0]
    good = [await _insert(conn, "noop", "{}") for _ in range(3)]
    rec = Recorder()
    async with run_workers(db_url, "pw", recorder=rec, lease_seconds=2.0, pool_size=4):
        await wait_for(lambda: {e.job_id for e in rec.of(Completed)} >= set(good),
                       timeout=10, what="the valid jobs around the poison row")
    completed, dead, attempts, error = await _state(conn, poison)
    assert dead and not completed and attempts == 2147483647
    assert error == "attempts used up before a claim (2147483647 of 5)"


async def test_a_row_that_breaks_every_claim_is_quarantined(
    db_url: str, conn: psycopg.AsyncConnection[Any], tmp_path: Path
) -> None:
    """A row no claim can take without the statement failing (here a trigger an operator
    added; in the wild, a corrupt value or a constraint): dead with the reason, while the
    valid jobs around it are claimed and completed, and the worker logs no error."""
    good_before = [await _insert(conn, "noop", "{}") for _ in range(3)]
    poison = await _insert(conn, "noop", "{}")
    good_after = [await _insert(conn, "noop", "{}") for _ in range(3)]
    await _refuse_claims(conn, "'poison row %', NEW.id", only=poison)
    log = tmp_path / "worker.log"
    proc = spawn_worker(db_url, "qw", log, lease=2.0, pool_size=10, poll=0.5)
    try:
        async def all_done() -> bool:
            states = [await _state(conn, j) for j in [*good_before, *good_after]]
            return all(s[0] for s in states) and bool((await _state(conn, poison))[1])

        await wait_for(all_done, timeout=20, what="valid jobs completed and the poison dead")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 20)
    assert code == 0
    completed, dead, attempts, error = await _state(conn, poison)
    assert dead and not completed and attempts == 0
    assert error.startswith("quarantined: claiming it fails (RaiseException: poison row")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert not [d for d in lines if d.get("level") in ("error", "critical")]
    assert any(d.get("msg") == "job quarantined" and d.get("job_id") == poison for d in lines)


async def test_quarantine_is_reported_as_an_event(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    poison = await _insert(conn, "noop", "{}")
    await conn.execute(
        "ALTER TABLE taskboard_jobs ADD CONSTRAINT no_claim_of_poison"
        f" CHECK (id <> {poison} OR lease_token IS NULL) NOT VALID"
    )
    rec = Recorder()
    async with run_workers(db_url, "ew", recorder=rec, lease_seconds=2.0, pool_size=4):
        [event] = await wait_for(lambda: rec.of(Quarantined, job_id=poison), timeout=10,
                                 what="the quarantine event")
    assert "CheckViolation" in event.error


async def test_the_probe_finds_a_poison_row_another_worker_holds_locked_for_a_moment(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    """Every worker retries the claim that fails, so the poison row is often locked by
    another's claim or probe when this one tries it alone: the trial skips it (SKIP LOCKED)
    and, counted innocent, left the probe with nobody to blame (the short fault run logged
    'unexpected error' from three workers at once). Skipped rows are tried again."""
    good = [await _insert(conn, "noop", "{}") for _ in range(2)]
    poison = await _insert(conn, "noop", "{}")
    await _refuse_claims(conn, "'poison row %', NEW.id", only=poison)
    async with _engine(db_url) as engine, \
            await psycopg.AsyncConnection.connect(db_url) as other:
        await other.execute(
            "SELECT id FROM taskboard_jobs WHERE id = %s FOR NO KEY UPDATE", (poison,)
        )
        probing = asyncio.create_task(quarantine.probe(
            engine, worker_id="p", lease_seconds=5, queues=["default"],
            kinds=["noop"], skip=[],
        ))
        await asyncio.sleep(quarantine.PROBE_PAUSE_SECONDS * 1.5)
        await other.rollback()  # the other worker's claim ends
        found = await probing
    assert [job_id for job_id, _ in found.to_quarantine] == [poison]
    assert [job_id for job_id, _ in found.quarantined] == [poison]
    assert found.innocent == len(good)


async def test_the_probe_looks_past_the_rows_the_failed_claim_skipped(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    """A claim skips rows other workers hold locked and meets a poison row further down than
    its `limit` first rows; by the time of the probe those rows are free and claim fine alone
    (a 10-minute soak logged 'unexpected error' so). The probe goes on to the next rows."""
    good = [await _insert(conn, "noop", "{}") for _ in range(quarantine.PROBE_LIMIT + 5)]
    poison = await _insert(conn, "noop", "{}")
    await _refuse_claims(conn, "'poison row %', NEW.id", only=poison)
    found = await _probe(db_url)
    assert [job_id for job_id, _ in found.to_quarantine] == [poison]
    assert [job_id for job_id, _ in found.quarantined] == [poison]
    assert found.innocent == len(good)


async def test_the_probe_holds_the_poison_row_until_its_quarantine_commits(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    """Were the row let go between the trial that found it guilty and its quarantine,
    another worker's claim could take it in that gap and fail again (a 10-minute soak with
    two poison rows and three workers probing at once logged 'unexpected error' so). The
    refusal names the transaction of the trial, the quarantine stamps its own: they must be
    one transaction, which holds the row locked from the trial on."""
    good = await _insert(conn, "noop", "{}")
    poison = await _insert(conn, "noop", "{}")
    await conn.execute(
        "CREATE FUNCTION refuse_claim() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN"
        "   IF NEW.id = " + str(poison) + " AND NEW.lease_token IS NOT NULL THEN"
        "     RAISE EXCEPTION 'poison row in xact %', txid_current();"
        "   END IF;"
        "   IF NEW.id = " + str(poison) + " AND NEW.failed_at IS NOT NULL"
        "      AND OLD.failed_at IS NULL THEN"
        "     NEW.last_error := NEW.last_error || ' | quarantined in xact ' || txid_current();"
        "   END IF;"
        "   RETURN NEW; END $$"
    )
    await conn.execute(
        "CREATE TRIGGER refuse_claim BEFORE UPDATE ON taskboard_jobs"
        " FOR EACH ROW EXECUTE FUNCTION refuse_claim()"
    )
    found = await _probe(db_url)
    assert [job_id for job_id, _ in found.quarantined] == [poison]
    cur = await conn.execute(
        "SELECT id, failed_at IS NOT NULL, last_error, attempts FROM taskboard_jobs ORDER BY id"
    )
    rows = await cur.fetchall()
    assert rows[0] == (good, False, None, 0)  # the probe claimed nothing
    assert rows[1][:2] == (poison, True)
    error = rows[1][2]
    trial = error.split("poison row in xact ")[1].split(")")[0]
    quarantined = error.split("quarantined in xact ")[1]
    assert trial == quarantined, error


@contextlib.asynccontextmanager
async def _engine(db_url: str) -> AsyncIterator[HeldConnection]:
    """A worker's engine connection (its session settings) on a pool of one."""
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        db_url, min_size=1, max_size=1, kwargs={"autocommit": True}, open=False
    )
    await pool.open(wait=True)
    try:
        yield HeldConnection(pool, role="engine", answer_timeout=5.0,
                             session_params=session_params(statement_timeout=2.0,
                                                           lock_timeout=1.0))
    finally:
        await pool.close()


async def _probe(db_url: str) -> quarantine.Probe:
    """One probe of the default queue's no-op jobs, as a worker's engine connection runs it."""
    async with _engine(db_url) as engine:
        return await quarantine.probe(
            engine, worker_id="p", lease_seconds=5, queues=["default"], kinds=["noop"],
            skip=[], limit=quarantine.PROBE_LIMIT,
        )


async def _refuse_claims(
    conn: psycopg.AsyncConnection[Any], message: str, only: int | None = None
) -> None:
    """A trigger that makes every claim (or only claims of job `only`) raise `message`."""
    which = "" if only is None else f" AND NEW.id = {int(only)}"
    await conn.execute(
        "CREATE FUNCTION refuse_claim() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN IF NEW.lease_token IS NOT NULL" + which + " THEN RAISE EXCEPTION "
        + message + "; END IF; RETURN NEW; END $$"
    )
    await conn.execute(
        "CREATE TRIGGER refuse_claim BEFORE UPDATE ON taskboard_jobs"
        " FOR EACH ROW EXECUTE FUNCTION refuse_claim()"
    )


async def test_two_poison_rows_alone_in_the_queue_are_both_quarantined(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    """No row claims fine to compare with; each fails with its own message, so each is to
    blame (a 10-minute soak: two poison rows at the end of a drained queue were never put
    aside, and every worker's claim kept failing until a good job came in behind them)."""
    poison = [await _insert(conn, "noop", "{}") for _ in range(2)]
    await _refuse_claims(conn, "'poison row %', NEW.id")
    found = await _probe(db_url)
    assert sorted(job_id for job_id, _ in found.quarantined) == poison
    cur = await conn.execute("SELECT count(*) FROM taskboard_jobs WHERE failed_at IS NOT NULL")
    assert await cur.fetchone() == (2,)


async def test_one_refusal_every_row_meets_quarantines_nothing(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    """The same error word for word on every row (a trigger refusing all claims) is not a
    row's fault: the probe leaves the jobs alone for the supervisor to judge."""
    for _ in range(3):
        await _insert(conn, "noop", "{}")
    await _refuse_claims(conn, "'claims are switched off here'")
    found = await _probe(db_url)
    assert len(found.guilty) == 3
    assert found.quarantined == []
    cur = await conn.execute("SELECT count(*) FROM taskboard_jobs WHERE failed_at IS NULL")
    assert await cur.fetchone() == (3,)
