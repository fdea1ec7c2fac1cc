"""Two engine connections: two groups of completions (each with the claim of their
replacements) in the database at once, and a lost answer on either settled as on one.

The barrier is a table lock held in a second real connection: every grouped completion
waits on it in the database, so what pg_stat_activity shows while it is held is how many
groups the worker has out, whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from taskboard.core.engine.events import Completed, CompletionRejected
from taskboard.core.kinds import JobContext, JobKind, builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue_many

from tests.conftest import wait_for
from tests.drop_proxy import DropProxy
from tests.harness import Recorder, run_workers

JOBS = 200  # two groups of 100 (`JOBS_PER_GROUP`), one per engine connection

# Grouped completions waiting on the barrier, by COMPLETE_MANY's opening comment (the
# activity view keeps only the start of a long statement).
WAITING_GROUPS = """
SELECT count(DISTINCT pid) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid()
   AND wait_event_type = 'Lock' AND query LIKE '%Each lease once%'
"""


def held_registry(gate: asyncio.Event) -> Any:
    """`held` jobs: their handlers (which write nothing) end together when `gate` opens."""

    async def held(ctx: JobContext) -> None:
        await gate.wait()

    registry = builtin_registry()
    registry.register(JobKind("held", lambda p: p, held))
    return registry


async def waiting_groups(conn: Any) -> int:
    cur = await conn.execute(WAITING_GROUPS)
    return int((await cur.fetchone())[0])


async def completed_in_db(conn: Any, ids: list[int]) -> int:
    cur = await conn.execute(
        "SELECT count(*) FROM taskboard_jobs WHERE id = ANY(%s) AND completed_at IS NOT NULL",
        (ids,),
    )
    return int((await cur.fetchone())[0])


async def test_two_groups_are_in_the_database_at_once(db_url: str, conn: Any) -> None:
    gate = asyncio.Event()
    registry = held_registry(gate)
    ids = await enqueue_many(conn, registry, [NewJob("held") for _ in range(JOBS)])
    rec = Recorder()
    async with (
        run_workers(db_url, "w", recorder=rec, registry=registry, engine_connections=2,
                    concurrency=JOBS) as (running,),
        await psycopg.AsyncConnection.connect(db_url) as barrier,
    ):
        await wait_for(lambda: len(running.worker.in_flight_jobs()) == JOBS,
                       what="every job held")
        # Taken after the claims, before the completions: the updates of both groups wait.
        await barrier.execute("LOCK TABLE taskboard_jobs IN SHARE MODE")
        gate.set()
        seen = await wait_for(
            lambda: _at_least(waiting_groups(conn), 2), timeout=2.0,
            what="two grouped completions waiting in the database at once",
        )
        assert seen == 2
        await barrier.rollback()
        await wait_for(lambda: len(rec.of(Completed)) == JOBS, what="every job completed")
    assert await completed_in_db(conn, ids) == JOBS
    assert not rec.of(CompletionRejected)


@contextlib.asynccontextmanager
async def answers_lost(
    db_url: str, conn: Any, *, jobs: int, engine_connections: int, groups: int
) -> AsyncIterator[tuple[list[int], Recorder]]:
    """`jobs` held jobs of one worker end together; their `groups` grouped completions
    reach the server (held there by a table lock until all are in), and then commit with
    the proxy dropping every answer. Yields (job ids, the worker's events) once every job
    is completed in the database, the worker still running and waiting for its answers."""
    gate = asyncio.Event()
    registry = held_registry(gate)
    ids = await enqueue_many(conn, registry, [NewJob("held") for _ in range(jobs)])
    rec = Recorder()
    async with (
        DropProxy.for_url(db_url) as proxy,
        run_workers(proxy.url(db_url), "w", recorder=rec, registry=registry, lease_seconds=10,
                    engine_connections=engine_connections, concurrency=jobs) as (running,),
        await psycopg.AsyncConnection.connect(db_url) as barrier,
    ):
        await wait_for(lambda: len(running.worker.in_flight_jobs()) == jobs,
                       what="every job held")
        await barrier.execute("LOCK TABLE taskboard_jobs IN SHARE MODE")
        gate.set()
        await wait_for(lambda: _at_least(waiting_groups(conn), groups), timeout=5.0,
                       what=f"{groups} group(s) waiting in the database")
        proxy.drop_flows()  # the requests are in; the answers will go nowhere
        await barrier.rollback()
        await wait_for(lambda: _equal(completed_in_db(conn, ids), jobs),
                       what="the groups committed")
        assert not rec.of(Completed), "an answer came back through a dropped flow"
        yield ids, rec


async def test_lost_answers_on_both_engine_connections_are_read_from_the_history(
    db_url: str, conn: Any
) -> None:
    """Both groups reach the server and commit, and neither answer comes back: each
    connection's group gives up at the answer limit, its flights go back to be completed
    again, and the second try reads the first's commit from the attempts history, so each
    job is reported completed, once, never rejected by its own completion."""
    async with answers_lost(db_url, conn, jobs=JOBS, engine_connections=2, groups=2) as (
        ids, rec
    ):
        await wait_for(lambda: len(rec.of(Completed)) == JOBS, timeout=20,
                       what="every completion settled after the lost answers")
    assert sorted(e.job_id for e in rec.of(Completed)) == sorted(ids)
    assert not rec.of(CompletionRejected)
    cur = await conn.execute(
        "SELECT outcome, count(*) FROM taskboard_attempts WHERE job_id = ANY(%s) GROUP BY 1",
        (ids,),
    )
    assert await cur.fetchall() == [("completed", JOBS)]


async def _at_least(count: Any, n: int) -> int | None:
    value = int(await count)
    return value if value >= n else None


async def _equal(count: Any, n: int) -> bool:
    return int(await count) == n


# Job P's row refuses its first three updates (the group, P alone, P's quarantine), so the
# completions role fails on lane 0 and restarts; job S's completion sleeps once, so the
# other lane's group is still in the database when that happens.
FAULTS = (
    "CREATE SEQUENCE taskboard_test_poison_hits",
    "CREATE SEQUENCE taskboard_test_slow_hits",
    """CREATE FUNCTION taskboard_test_faults() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF NEW.id = current_setting('taskboard_test.poison_id')::bigint THEN
           IF nextval('taskboard_test_poison_hits') <= 3 THEN
             RAISE EXCEPTION 'poison row %', NEW.id;
           END IF;
         END IF;
         IF NEW.id = current_setting('taskboard_test.slow_id')::bigint
            AND NEW.completed_at IS NOT NULL THEN
           IF nextval('taskboard_test_slow_hits') = 1 THEN
             PERFORM pg_sleep(2);
           END IF;
         END IF;
         RETURN NEW;
       END $$""",
    """CREATE TRIGGER taskboard_test_faults BEFORE UPDATE ON taskboard_jobs
       FOR EACH ROW EXECUTE FUNCTION taskboard_test_faults()""",
)


async def test_a_lane_that_fails_does_not_drop_the_other_lane_s_group(
    db_url: str, conn: Any
) -> None:
    """The completions role restarts after an error no single row explains; the other
    connection's group, still in the database, is cancelled with it: its flights go back to
    be completed again instead of waiting for ever on futures nobody holds."""
    gate = asyncio.Event()
    registry = held_registry(gate)
    ids = await enqueue_many(conn, registry, [NewJob("held") for _ in range(JOBS)])
    db = conn.info.dbname
    await conn.execute(f"ALTER DATABASE {db} SET taskboard_test.poison_id = {min(ids)}")
    await conn.execute(f"ALTER DATABASE {db} SET taskboard_test.slow_id = {max(ids)}")
    rec = Recorder()
    async with run_workers(
        db_url, "w", recorder=rec, registry=registry, engine_connections=2, concurrency=JOBS
    ) as (running,):
        await wait_for(lambda: len(running.worker.in_flight_jobs()) == JOBS,
                       what="every job held")
        for statement in FAULTS:  # after the claims, which update the rows too
            await conn.execute(statement)
        gate.set()
        await wait_for(lambda: len({e.job_id for e in rec.of(Completed)}) == JOBS, timeout=20,
                       what="every job completed after the role restarted")
    assert await completed_in_db(conn, ids) == JOBS
    cur = await conn.execute("SELECT nextval('taskboard_test_poison_hits')")
    assert (await cur.fetchone())[0] > 3, "the poison row never made the role fail"
