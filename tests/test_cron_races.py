"""Issue 22, schedule firing re-checks in the statement that writes (invariant 15): each
race forced with two real connections, the second holding the schedule's row while the
first's ENQUEUE_SLOT waits on it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from taskboard.core import sql
from taskboard.core.engine.connection import HeldConnection, session_params
from taskboard.core.engine.scheduler import RECHECK_SECONDS, Scheduler
from taskboard.core.engine.supervisor import Supervisor
from taskboard.core.kinds import builtin_registry
from taskboard.core.operations import schedules
from taskboard.core.operations.schedules import Schedule

from tests.conftest import wait_for

REG = builtin_registry()


async def _connect(url: str, zone: str = "UTC") -> AsyncConnection[Any]:
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    await conn.execute(f"SET timezone = '{zone}'")
    return conn


async def _now(conn: AsyncConnection[Any]) -> datetime:
    cur = await conn.execute("SELECT now()")
    row = await cur.fetchone()
    assert row is not None
    now: datetime = row[0]
    return now


async def _add(conn: AsyncConnection[Any], name: str, cron_expr: str) -> Schedule:
    await schedules.add_schedule(conn, REG, Schedule(name, cron_expr, "noop"))
    await conn.execute("UPDATE taskboard_schedules SET created_at = now() - interval '1 hour'"
                       " WHERE name = %s", (name,))
    [s] = [s for s in await schedules.list_schedules(conn) if s.name == name]
    return s


async def _jobs(conn: AsyncConnection[Any]) -> list[str]:
    cur = await conn.execute("SELECT unique_key FROM taskboard_jobs ORDER BY id")
    return [key for (key,) in await cur.fetchall()]


async def _fire_while_held(
    url: str, first: AsyncConnection[Any], schedule: Schedule, slot: datetime,
    hold: Callable[[AsyncConnection[Any]], Awaitable[None]], zone: str = "UTC",
) -> int | None:
    """`first` fires `slot` of `schedule` while a second connection (in session zone
    `zone`) holds the row in an open transaction after `hold`; it commits only once the
    first is seen waiting on its lock. What the first's ENQUEUE_SLOT returned."""
    second = await _connect(url, zone)
    # Watched from a third, autocommit connection: inside a transaction pg_stat_activity is
    # a snapshot taken at its first read.
    observer = await _connect(url)
    try:
        await second.set_autocommit(False)
        await hold(second)
        cur = await first.execute("SELECT pg_backend_pid()")
        [pid] = await cur.fetchone() or (0,)
        firing = asyncio.create_task(schedules.enqueue_slot(first, schedule, slot))

        async def waiting() -> bool:
            c = await observer.execute(
                "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,))
            row = await c.fetchone()
            return bool(row and row[0])

        await wait_for(waiting, timeout=10, what="the first connection waiting on the row")
        assert not firing.done()
        await second.commit()
        return await asyncio.wait_for(firing, 10)
    finally:
        await second.close()
        await observer.close()


async def _edit(second: AsyncConnection[Any], old: Schedule) -> None:
    # `schedule add` with the same name and another expression, not yet committed.
    await schedules.add_schedule(second, REG, Schedule(old.name, "0 3 * * *", "noop"))


async def _remove(second: AsyncConnection[Any], old: Schedule) -> None:
    await schedules.remove_schedule(second, old.name)


async def _replace(second: AsyncConnection[Any], old: Schedule) -> None:
    await schedules.remove_schedule(second, old.name)
    await schedules.add_schedule(second, REG, Schedule(old.name, old.cron, "noop"))


async def _disable(second: AsyncConnection[Any], old: Schedule) -> None:
    assert await schedules.disable_schedule(second, old, "payload: refused")


@pytest.mark.parametrize("change", [_edit, _remove, _replace, _disable],
                         ids=["edited", "removed", "removed-and-added", "disabled"])
async def test_a_slot_computed_before_the_schedule_changed_does_not_fire(
    db_url: str, conn: AsyncConnection[Any],
    change: Callable[[AsyncConnection[Any], Schedule], Awaitable[None]],
) -> None:
    # Without the revision and enabled re-check, the edited and disabled cases fire the
    # stale slot (the removed ones are skipped by the row lock alone).
    old = await _add(conn, "nightly", "* * * * *")
    slot = old.due_slot(await _now(conn))
    assert slot is not None

    async def hold(second: AsyncConnection[Any]) -> None:
        await change(second, old)

    assert await _fire_while_held(db_url, conn, old, slot, hold) is None
    assert await _jobs(conn) == []
    if change is _edit:
        [now_] = await schedules.list_schedules(conn)
        assert (now_.cron, now_.last_slot) == ("0 3 * * *", None)


async def test_workers_in_different_session_zones_racing_fire_one_slot_once(
    db_url: str, conn: AsyncConnection[Any]
) -> None:
    # Kathmandu (UTC+05:45) and UTC sessions compute the due slot of '*/2 * * * *' from their
    # own now(); at 683562c they got different minutes and both fired.
    utc = conn
    await utc.execute("SET timezone = 'UTC'")
    s = await _add(utc, "every2", "*/2 * * * *")
    ktm = await _connect(db_url, "Asia/Kathmandu")
    try:
        for _ in range(3):  # read again if a slot boundary passes between the reads
            before, ktm_now, after = await _now(utc), await _now(ktm), await _now(utc)
            if s.due_slot(before) == s.due_slot(after):
                break
        offset = ktm_now.utcoffset()
        assert offset is not None and offset.total_seconds() == 20700
        ktm_slot, utc_slot = s.due_slot(ktm_now), s.due_slot(before)
    finally:
        await ktm.close()
    assert ktm_slot is not None and utc_slot is not None
    assert ktm_slot == utc_slot and utc_slot.minute % 2 == 0

    async def fire_in_kathmandu(second: AsyncConnection[Any]) -> None:
        assert await schedules.enqueue_slot(second, s, ktm_slot) is not None

    assert await _fire_while_held(db_url, utc, s, utc_slot, fire_in_kathmandu,
                                  zone="Asia/Kathmandu") is None
    keys = await _jobs(utc)
    assert len(keys) == 1 and keys[0].endswith(f"{utc_slot:%H:%M}:00Z"), keys


async def test_a_failure_in_an_older_version_does_not_disable_the_new_one(
    conn: AsyncConnection[Any],
) -> None:
    old = await _add(conn, "fixed", "* * * * *")
    await schedules.add_schedule(conn, REG, Schedule("fixed", "*/5 * * * *", "noop"))
    assert not await schedules.disable_schedule(conn, old, "the old version failed")
    cur = await conn.execute(sql.LIST_SCHEDULES)
    [row] = await cur.fetchall()
    assert row[-2:] == (None, None)


@contextlib.asynccontextmanager
async def _scheduler(url: str) -> AsyncIterator[Scheduler]:
    """A worker's scheduler role on its own engine connection, ticked by hand."""
    pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
        url, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False)
    await pool.open()
    engine = HeldConnection(pool, role="engine", session_params=session_params(5, 5),
                            answer_timeout=10)
    supervisor = Supervisor("t", unhealthy_after=60, retry_cap=1, on_unhealthy=lambda r, e: None)
    try:
        yield Scheduler(worker_id="t", kinds=["sleep", "noop"], connection=engine,
                        supervisor=supervisor, retry_cap=1.0, registry=REG)
    finally:
        await engine.close()
        await pool.close()


async def test_the_scheduler_fires_the_new_version_of_a_schedule_edited_while_it_fired(
    db_url: str, conn: AsyncConnection[Any]
) -> None:
    # The worker's own loop, not just the statement: its slot is refused because the
    # schedule changed under it, and it looks again within RECHECK_SECONDS instead of
    # waiting for the next reload, so the slot is not lost, and fires with the new payload.
    await _add(conn, "nightly", "* * * * *")
    second = await _connect(db_url)
    async with _scheduler(db_url) as scheduler:
        try:
            await second.set_autocommit(False)
            await schedules.add_schedule(second, REG, Schedule("nightly", "* * * * *", "sleep",
                                                               {"seconds": 0.01}))
            ticking = asyncio.create_task(scheduler.tick())

            async def waiting() -> bool:
                c = await conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%%UPDATE taskboard_schedules%%'")
                row = await c.fetchone()
                return bool(row and row[0])

            await wait_for(waiting, timeout=10, what="the scheduler waiting on the row")
            await second.commit()
            wait = await asyncio.wait_for(ticking, 10)
            assert wait <= RECHECK_SECONDS and await _jobs(conn) == []
            await scheduler.tick()
            cur = await conn.execute("SELECT kind, payload FROM taskboard_jobs")
            assert await cur.fetchall() == [("sleep", {"seconds": 0.01})]
            assert scheduler.enqueued == 1
        finally:
            await second.close()


async def test_a_slot_the_jobs_table_refuses_disables_its_schedule_and_the_rest_run(
    db_url: str, conn: AsyncConnection[Any]
) -> None:
    # A constraint of the jobs table (a newer schema's size limit, a DBA's CHECK) refusing
    # the schedule's row: one schedule disabled with the error, the scheduler goes on.
    await _add(conn, "refused", "* * * * *")
    await schedules.add_schedule(conn, REG, Schedule("fine", "* * * * *", "sleep",
                                                     {"seconds": 0.01}))
    await conn.execute("UPDATE taskboard_schedules SET created_at = now() - interval '1 hour'")
    await conn.execute("ALTER TABLE taskboard_jobs ADD CONSTRAINT no_noop"
                       " CHECK (kind <> 'noop') NOT VALID")
    async with _scheduler(db_url) as scheduler:
        await scheduler.tick()
        await scheduler.tick()  # a second pass neither fails nor tries the disabled one again
    assert (scheduler.enqueued, scheduler.disabled) == (1, 1)
    rows = {s.name: s for s in await schedules.list_schedules(conn)}
    assert rows["fine"].disabled_at is None
    assert rows["refused"].disabled_at is not None
    assert 'violates check constraint "no_noop"' in (rows["refused"].disabled_error or "")
    assert [k.split(":")[1] for k in await _jobs(conn)] == ["fine"]


def test_slots_missed_by_a_short_absence_fire_in_order_and_a_long_absence_fires_the_latest() -> None:
    """A worker that wakes 3 s late on an every-second schedule fires the three slots it
    missed, oldest first (the soak saw one skipped after a 1.5 s stall of the machine); a
    fleet away for an hour fires only the latest slot, not 3,600."""
    import dataclasses
    from datetime import UTC, datetime, timedelta

    from taskboard.core.operations.schedules import CATCH_UP_SECONDS, Schedule

    t0 = datetime(2026, 12, 4, 15, 19, 46, tzinfo=UTC)
    schedule = Schedule(name="often", cron="* * * * * *", kind="noop", payload={},
                        queue="default", priority=0, max_attempts=5, timeout_seconds=None,
                        created_at=t0 - timedelta(hours=1), last_slot=t0)
    now = t0 + timedelta(seconds=3, milliseconds=300)
    fired = []
    while (slot := schedule.due_slot(now)) is not None:
        fired.append(slot)
        schedule = dataclasses.replace(schedule, last_slot=slot)
        if not schedule.behind(slot, now):
            break
    assert fired == [t0 + timedelta(seconds=n) for n in (1, 2, 3)]

    schedule = dataclasses.replace(schedule, last_slot=t0)
    later = t0 + timedelta(seconds=CATCH_UP_SECONDS + 3600.5)
    assert schedule.due_slot(later) == later.replace(microsecond=0)
