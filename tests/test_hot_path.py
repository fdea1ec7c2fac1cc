"""The worker's per-job shortcuts keep their meaning: arrays sent in one join arrive as the
values they were, rows filled by column name refuse a result that does not fit, and a
flight whose local deadline comes sooner than the one the deadline loop watches is still
given up at its own."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from taskboard.core.engine.flights import Flight, FlightTable, PauseGate
from taskboard.core.engine.lease_keeper import LeaseKeeper
from taskboard.core.engine.outcomes import WorkerCounters
from taskboard.core.engine.records import ClaimedJob, CompleteRow
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.wire import Float8Array, Int8Array, UuidArray, record_row

from tests.conftest import wait_for


async def test_arrays_sent_in_one_join_arrive_as_the_values_they_were(conn: Any) -> None:
    ids = [1, -2, 2**62, 0]
    tokens = [uuid.uuid4() for _ in range(3)]
    floats = [0.25, None, 1e-9, -3.5, 123456.789012345]
    cur = await conn.execute(
        "SELECT %(ids)s::bigint[], %(tokens)s::uuid[], %(floats)s::float8[],"
        " %(none)s::bigint[], %(empty)s::uuid[]",
        {"ids": Int8Array(ids), "tokens": UuidArray(tokens), "floats": Float8Array(floats),
         "none": Int8Array([]), "empty": UuidArray([])},
    )
    assert await cur.fetchone() == (ids, tokens, floats, [], [])


async def test_rows_filled_by_column_name_refuse_a_result_that_does_not_fit(conn: Any) -> None:
    token = uuid.uuid4()
    async with conn.cursor(row_factory=record_row(CompleteRow)) as cur:
        # Columns in another order than the fields: read by name, not by position.
        await cur.execute(
            "SELECT true AS busy, %s::uuid AS token, 7::bigint AS id,"
            " false AS completed, false AS already, false AS gone", (token,)
        )
        row = await cur.fetchone()
    assert row == CompleteRow(id=7, token=token, completed=False, busy=True, already=False,
                              gone=False)
    async with conn.cursor(row_factory=record_row(CompleteRow)) as cur:
        with pytest.raises(TypeError, match=r"columns \['stray'\] unknown"):
            await cur.execute("SELECT 7::bigint AS id, %s::uuid AS token, true AS completed,"
                              " true AS busy, true AS already, true AS gone, 1 AS stray",
                              (token,))
            await cur.fetchone()
        with pytest.raises(TypeError, match=r"fields \['already', 'gone'\] missing"):
            await cur.execute("SELECT 7::bigint AS id, %s::uuid AS token, true AS completed,"
                              " true AS busy", (token,))
            await cur.fetchone()


def _flight(job_id: int, deadline: float, lease: float) -> Flight:
    now = datetime.now(UTC)
    job = ClaimedJob(
        id=job_id, kind="noop", payload="{}", queue="default", attempt=1, max_attempts=5,
        ordinal=1, token=uuid.uuid4(), lease_expires_at=now, timeout=None, run_at=now,
        previous_token=None, previous_worker=None, db_now=now, identity=str(job_id),
    )
    return Flight(job, None, deadline=deadline, claimed_at=0.0, lease_seconds=lease,
                  renew_every=lease / 3)


async def test_a_sooner_deadline_adopted_while_a_later_one_is_watched_is_kept() -> None:
    settings = WorkerSettings(lease_seconds=60)
    flights = FlightTable(10, 8)
    keeper = LeaseKeeper(
        worker_id="w", settings=settings, flights=flights, gate=PauseGate(),
        engine=None, supervisor=None, counters=WorkerCounters(),  # type: ignore[arg-type]
        emit=lambda event: None,
    )
    loop = asyncio.get_running_loop()
    long = _flight(1, loop.time() + 50, 60)
    flights.add(long)
    keeper.poke(long.deadline, long.renew_every)
    watching = loop.create_task(keeper.deadlines())
    try:
        await asyncio.sleep(0.05)  # the loop now sleeps toward the long flight's deadline
        later = _flight(2, loop.time() + 55, 60)  # later than the one watched: no wake-up
        flights.add(later)
        keeper.poke(later.deadline, later.renew_every)
        await asyncio.sleep(0.05)
        short = _flight(3, loop.time() + 0.3, 2)  # a kind's 2 s lease: sooner
        flights.add(short)
        keeper.poke(short.deadline, short.renew_every)
        await wait_for(lambda: short.lost is not None, timeout=5, what="the short lease lost")
        assert short.lost is not None and "local deadline passed" in short.lost
        assert long.lost is None and later.lost is None
    finally:
        watching.cancel()
