"""The batch enqueue (binary arrays, one statement per batch) against a real PostgreSQL:
what goes in comes back exactly, unique keys keep their meaning within a batch and against
the table, a bad job refuses the whole batch by its index, the caller's transaction decides,
and each queue is woken once per batch."""

from __future__ import annotations

import asyncio
import enum
import random
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from taskboard.core.base.errors import ValidationError
from taskboard.core.kinds import JobKind, JsonObject, builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue, enqueue_detailed, enqueue_many

from tests.conftest import wait_for

REG = builtin_registry()
EMAIL = {"to": "Maya <maya@example.com>", "subject": "Receipt", "text": "Thanks"}
BILL = {"customer": "cus_maya", "amount": 1999, "currency": "EUR"}
COLUMNS = ("kind, payload, queue, priority, run_at, max_attempts, timeout_seconds, unique_key,"
           " created_at")


def _as_is(payload: Any) -> JsonObject:
    return dict(payload)


ODD = builtin_registry()
# Above the 1 MiB default: the big payload below is about 1.05 MB of JSON.
ODD.register(JobKind("anything", _as_is, max_payload_bytes=2 * 1024 * 1024))


class Urgency(enum.IntEnum):
    HIGH = 7


async def _rows(conn: psycopg.AsyncConnection[Any], ids: list[int]) -> dict[int, tuple[Any, ...]]:
    cur = await conn.execute(
        f"SELECT id, {COLUMNS} FROM taskboard_jobs WHERE id = ANY(%s)", (ids,))
    return {row[0]: row[1:] for row in await cur.fetchall()}


async def _count(conn: psycopg.AsyncConnection[Any]) -> int:
    cur = await conn.execute("SELECT count(*) FROM taskboard_jobs")
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


def _job(i: int, rng: random.Random) -> NewJob:
    """Job `i` of a mixed batch: every kind, queue, option and a key now and then."""
    kind = ("noop", "sleep", "email", "billing")[i % 4]
    payload = {"noop": {}, "sleep": {"seconds": i % 50}, "email": {**EMAIL, "subject": f"#{i}"},
               "billing": {**BILL, "amount": 100 + i}}[kind]
    zone = timezone(timedelta(hours=rng.choice((-7, 0, 5.5))))
    return NewJob(
        kind, payload,
        queue=("default", "mail", "billing-eu")[i % 3],
        priority=Urgency.HIGH if i % 97 == 0 else rng.randint(-1_000_000, 1_000_000),
        run_at=None if i % 5 else datetime(2030, 1, 1, tzinfo=zone) + timedelta(seconds=i),
        max_attempts=rng.randint(1, 1000),
        timeout=None if i % 3 else (30 if i % 2 else 0.25 + i),
        unique_key=f"key-{i}" if i % 11 == 0 else None,
    )


async def test_a_large_batch_round_trips_exactly(conn: psycopg.AsyncConnection[Any]) -> None:
    rng = random.Random(12)
    jobs = [_job(i, rng) for i in range(5000)]
    ids = await enqueue_many(conn, REG, jobs)
    assert len(ids) == len(set(ids)) == 5000
    plain = [job_id for job_id, job in zip(ids, jobs, strict=True) if job.unique_key is None]
    assert plain == sorted(plain), "jobs without a key get ids in input order"
    rows = await _rows(conn, ids)
    for job_id, job in zip(ids, jobs, strict=True):
        kind, payload, queue, priority, run_at, attempts, timeout, key, created = rows[job_id]
        assert (kind, queue, priority, attempts, key) == (
            job.kind, job.queue, int(job.priority), job.max_attempts, job.unique_key)
        assert payload == REG.validate(job.kind, job.payload)  # normalised, as validated
        assert run_at == (created if job.run_at is None else job.run_at)
        assert timeout == (None if job.timeout is None else float(job.timeout))
    assert await _count(conn) == 5000


async def test_unique_keys_within_a_batch_and_against_the_table(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    [held] = await enqueue_many(conn, REG, [NewJob("noop", unique_key="k1")])
    [done] = await enqueue_many(conn, REG, [NewJob("noop", unique_key="k2")])
    await conn.execute("UPDATE taskboard_jobs SET completed_at = now() WHERE id = %s", (done,))
    out = await enqueue_detailed(conn, REG, [
        NewJob("noop", unique_key="k1"),            # held by an unfinished job
        NewJob("noop", unique_key="k2"),            # its holder finished: free again
        NewJob("noop", {}, queue="other", unique_key="k2"),  # the one just above
        NewJob("sleep", {"seconds": 1}, unique_key="k1"),    # unique per kind
        NewJob("noop"),
        NewJob("noop", unique_key="k3"),
        NewJob("noop", unique_key="k3"),
        NewJob("noop"),
    ])
    assert out[0].id == held and out[0].existed
    assert not out[1].existed and out[1].id not in (held, done)
    assert out[2].id == out[1].id and out[2].existed
    assert not out[3].existed and out[3].id != held
    assert not out[5].existed and out[6].id == out[5].id and out[6].existed
    assert not out[4].existed and not out[7].existed and out[4].id < out[7].id
    assert len({e.id for e in out}) == 6
    assert await _count(conn) == 2 + 5
    rows = await _rows(conn, [out[1].id])
    assert rows[out[1].id][2] == "default", "the first of two duplicates is the one written"
    cur = await conn.execute("SELECT count(*) FROM taskboard_jobs WHERE queue = 'other'")
    assert await cur.fetchone() == (0,)


async def test_a_key_committed_by_another_batch_meanwhile_returns_that_job(
    db_url: str, conn: psycopg.AsyncConnection[Any],
) -> None:
    """B's statement starts while A's batch holds the keys uncommitted: B waits, then finds
    them taken but cannot see them in its snapshot, and asks again."""
    keys = [f"order-{i}" for i in range(50)]
    async with await psycopg.AsyncConnection.connect(db_url) as a, \
            await psycopg.AsyncConnection.connect(db_url, autocommit=True) as b:
        first = await enqueue_detailed(a, REG, [NewJob("noop", unique_key=k) for k in keys])
        b_pid = b.info.backend_pid
        later = asyncio.ensure_future(enqueue_detailed(
            b, REG, [NewJob("noop"), *(NewJob("noop", unique_key=k) for k in reversed(keys))]))

        async def b_waits() -> bool:
            cur = await conn.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (b_pid,))
            row = await cur.fetchone()
            return row is not None and row[0] == "Lock"

        await wait_for(b_waits, timeout=10, what="B waiting on A's keys")
        await a.commit()
        second = await asyncio.wait_for(later, 10)
    assert [e.id for e in second[1:]] == [e.id for e in reversed(first)]
    assert all(e.existed for e in second[1:]) and not second[0].existed
    assert await _count(conn) == 51


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        (NewJob("sleep", {"seconds": "soon"}), "jobs[2500]: seconds: "),
        (NewJob("noop", {}, queue="bad\nqueue"), "jobs[2500]: queue: "),
        (NewJob("noop", unique_key="k" * 301), "jobs[2500]: key: "),
        (NewJob("noop", {}, priority=10**7), "jobs[2500]: priority: "),
        (NewJob("anything", {"x": float("nan")}), "jobs[2500]: payload: "),
        (NewJob("nosuchkind"), "jobs[2500]: unknown job kind 'nosuchkind'"),
        ({"kind": "noop"}, "jobs[2500]: must be a NewJob"),
    ],
    ids=["payload", "queue", "key", "priority", "json", "kind", "not-a-job"],
)
async def test_a_bad_job_in_the_middle_refuses_the_whole_batch_by_its_index(
    conn: psycopg.AsyncConnection[Any], bad: Any, where: str
) -> None:
    jobs = [NewJob("noop", unique_key=f"k{i}" if i % 2 else None) for i in range(5000)]
    jobs[2500] = bad
    with pytest.raises(ValidationError) as caught:
        await enqueue_many(conn, ODD, jobs)
    text = str(caught.value)
    assert text.startswith(where) and "\n" not in text and len(text) < 200, text
    assert await _count(conn) == 0


async def test_a_single_job_error_names_the_field_alone(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    with pytest.raises(ValidationError) as caught:
        await enqueue(conn, REG, "sleep", {"seconds": "soon"})
    assert str(caught.value).startswith("seconds: ") and caught.value.field == "seconds"


@pytest.mark.parametrize("with_keys", [False, True], ids=["plain", "with-keys"])
@pytest.mark.parametrize("how", ["implicit-first", "implicit-after-work", "explicit-block"])
async def test_inside_the_callers_transaction_rolled_back_nothing_exists(
    db_url: str, conn: psycopg.AsyncConnection[Any], with_keys: bool, how: str
) -> None:
    """However the application's transaction began (psycopg's implicit BEGIN at our first
    statement, at its own earlier work, or its `transaction()` block), it decides."""
    jobs = [NewJob("noop", unique_key=f"k{i}" if with_keys and i % 2 else None)
            for i in range(1000)]

    async def work(app: psycopg.AsyncConnection[Any]) -> None:
        if how != "implicit-first":
            await app.execute("CREATE TEMP TABLE uploads (url text)")
            await app.execute("INSERT INTO uploads VALUES ('https://example.com/a.png')")
        assert len(await enqueue_many(app, REG, jobs)) == 1000
        cur = await app.execute("SELECT count(*) FROM taskboard_jobs")
        assert await cur.fetchone() == (1000,)  # visible inside the transaction

    if how == "explicit-block":
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as app:
            async with app.transaction():
                await work(app)
                raise psycopg.Rollback()
    else:
        async with await psycopg.AsyncConnection.connect(db_url) as app:
            await work(app)
            await app.rollback()
    assert await _count(conn) == 0
    # The keys are free again: nothing of the rolled-back batch holds them.
    again = await enqueue_detailed(conn, REG, jobs)
    assert not any(e.existed for e in again) and await _count(conn) == 1000


async def _notifications(db_url: str, listener: psycopg.AsyncConnection[Any]) -> list[str]:
    """The wake-ups `listener` got so far: a sentinel sent now arrives after all of them."""
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as other:
        await other.execute("SELECT pg_notify('taskboard_jobs', 'sentinel')")
    got = []
    async for n in listener.notifies(timeout=10):
        if n.payload == "sentinel":
            return got
        got.append(n.payload)
    raise AssertionError(f"no sentinel within 10 s; got {got}")


async def test_each_queue_is_woken_once_per_batch_and_only_on_commit(
    db_url: str, conn: psycopg.AsyncConnection[Any],
) -> None:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as listener:
        await listener.execute("LISTEN taskboard_jobs")
        await enqueue_many(conn, REG, [NewJob("noop", {}, queue=("a", "b")[i % 2])
                                       for i in range(2000)])
        assert sorted(await _notifications(db_url, listener)) == ["a", "b"]
        mixed = [NewJob("noop", {}, queue=("a", "b")[i % 2], unique_key=f"k{i}" if i % 3 else None)
                 for i in range(2000)]
        await enqueue_many(conn, REG, mixed)
        assert sorted(await _notifications(db_url, listener)) == ["a", "b"]
        # Only queues that got a new job are woken: every key here is already held.
        await enqueue_many(conn, REG, [j for j in mixed if j.unique_key and j.queue == "b"])
        assert await _notifications(db_url, listener) == []
        async with await psycopg.AsyncConnection.connect(db_url) as app:
            await enqueue_many(app, REG, [NewJob("noop", {}, queue="c") for _ in range(10)])
            assert await _notifications(db_url, listener) == [], "woken before the commit"
            await app.commit()
        assert await _notifications(db_url, listener) == ["c"]


def _strictly_equal(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_strictly_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_strictly_equal, a, b))
    return bool(a == b)


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for i in range(depth):
        value = {f"level-{i}": value} if i % 2 else [value, i]
    return value


ODD_PAYLOADS: list[dict[str, Any]] = [
    {"text": "Zoë — 東京 ✉ \U0001d518\U0001d52b\U0001d526 🧾", "rtl": "\u202eevil", "joiners": "👩‍👩‍👧", "nbsp": "a\u00a0b"},
    {"escapes": 'quote " backslash \\ slash / \\u0000 literal', "ctl": "\t\r\n\x01\x1f\x7f",
     "seps": "\u2028\u2029", "bom": "\ufeff"},
    {"": "empty key", "key with \"quotes\" and \n newline": 1, "ключ": ["значение"]},
    {"ints": [0, -1, 2**31, -(2**63), 10**99], "floats": [0.1, -2.5, 1.0, 123456.789],
     "flags": [True, False, None]},
    {"deep": _nested(60)},
    {"big": "x" * 1_000_000, "many": list(range(10_000))},
]


async def test_odd_payloads_survive_exactly(conn: psycopg.AsyncConnection[Any]) -> None:
    jobs = [NewJob("anything", p) for p in ODD_PAYLOADS] + [NewJob("noop")]
    ids = await enqueue_many(conn, ODD, jobs)
    rows = await _rows(conn, ids)
    for job_id, payload in zip(ids, ODD_PAYLOADS, strict=False):
        assert _strictly_equal(rows[job_id][1], payload), payload.keys()
    assert rows[ids[-1]][1] == {}


async def test_finished_counts_stay_true_after_batches(conn: psycopg.AsyncConnection[Any]) -> None:
    """The statement-level counting triggers see the batch inserts (migration 3)."""
    ids = await enqueue_many(conn, REG, [NewJob("noop", unique_key=f"k{i}" if i % 2 else None)
                                         for i in range(300)])
    await conn.execute("UPDATE taskboard_jobs SET completed_at = now() WHERE id = ANY(%s)",
                       (ids[:100],))
    await enqueue_many(conn, REG, [NewJob("noop", unique_key=f"k{i}") for i in range(300)])
    cur = await conn.execute(
        "SELECT (SELECT coalesce(sum(n), 0) FROM taskboard_finished_counts"
        "         WHERE state = 'completed'),"
        "       (SELECT count(*) FROM taskboard_jobs WHERE completed_at IS NOT NULL),"
        "       (SELECT count(*) FROM taskboard_jobs)")
    assert await cur.fetchone() == (100, 100, 300 + 150 + 50)

