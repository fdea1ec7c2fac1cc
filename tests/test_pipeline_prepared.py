"""A statement that fails inside a pipeline must not leave psycopg believing in a prepared
statement the server never made.

psycopg prepares a statement on its sixth run (`prepare_threshold` 5) and records it as
prepared when it sends the Parse. Inside a pipeline, an earlier statement that fails makes
the server skip the rest, that Parse included, so the record is false: every later run of
the statement on that connection fails with "prepared statement _pg3_0 does not exist". A
fault run met this on a worker's engine connection (its group completion hit a timeout as
CLAIM was being prepared): every claim failed until the worker called itself unhealthy.
"""

from __future__ import annotations

import psycopg
import pytest
from taskboard.core.base.pipelines import pipeline
from taskboard.core.engine import leases
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue_many

REG = builtin_registry()
KINDS = REG.names()
THRESHOLD = 5  # psycopg's default prepare_threshold, which workers keep


async def test_a_failed_pipeline_leaves_no_false_prepared_statement(conn):
    query = "SELECT %s::int + 1"
    for n in range(THRESHOLD):
        await conn.execute(query, (n,))
    with pytest.raises(psycopg.errors.DivisionByZero):
        async with pipeline(conn):
            await conn.execute("SELECT 1 / 0")
            await conn.execute(query, (41,))  # the sixth run: prepared, or not at all
    cur = await conn.execute(query, (41,))
    assert await cur.fetchone() == (42,)
    cur = await conn.execute(query, (1,))
    assert await cur.fetchone() == (2,)


async def test_claims_go_on_after_a_group_completion_that_failed(conn):
    ids = await enqueue_many(conn, REG, [NewJob("noop") for _ in range(THRESHOLD + 3)])
    params = dict(worker_id="w", lease_seconds=30, queues=["default"], kinds=KINDS)
    held = [await leases.claim(conn, limit=1, **params) for _ in range(THRESHOLD)]
    assert [j.id for [j] in held] == ids[:THRESHOLD]
    # The completion half fails (here: the session turned read-only), so the claim sent
    # behind it, CLAIM's sixth run, never runs.
    await conn.execute("SET default_transaction_read_only = on")
    [first] = held[0]
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        await leases.complete_many_and_claim(conn, [(first.id, first.token)], limit=1, **params)
    await conn.execute("SET default_transaction_read_only = off")
    got = await leases.claim(conn, limit=1, **params)
    assert [j.id for j in got] == [ids[THRESHOLD]]
    again = await leases.claim(conn, limit=1, **params)
    assert [j.id for j in again] == [ids[THRESHOLD + 1]]
