"""A group of completions that fails twice over: once on a row its refill claim cannot take,
then on the connection while each flight is completed alone.

Seen in a 10-minute soak on a loaded machine: a poison row broke "COMPLETE_MANY + CLAIM",
the completer went one by one, and a completion timed out half-way. The error left the
grouping loop with the batch in hand; its flights waited for ever on futures nobody held
(asyncio: "Task was destroyed but it is pending!"), their leases renewed, their jobs never
finished, and one completion already committed was never reported.
"""

from __future__ import annotations

import asyncio
from typing import Any

from taskboard.core.engine.events import Claimed, Completed, CompletionRejected
from taskboard.core.kinds import JobContext, JobKind, builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue, enqueue_many

from tests.conftest import wait_for
from tests.faults.harness_rows import POISON_SETUP
from tests.harness import Recorder, run_workers

# The completion of one job sleeps past the statement timeout the second time it is
# written: the first is the group's (rolled back when its claim meets the poison row; a
# sequence is not), the second the one-by-one completion.
SLOW_ONCE = (
    "CREATE SEQUENCE taskboard_test_slow_once",
    """CREATE FUNCTION taskboard_test_slow_completion() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF NEW.completed_at IS NOT NULL AND OLD.completed_at IS NULL
            AND NEW.id = current_setting('taskboard_test.slow_id')::bigint
            AND nextval('taskboard_test_slow_once') = 2 THEN
           PERFORM pg_sleep(3);
         END IF;
         RETURN NEW;
       END $$""",
    """CREATE TRIGGER taskboard_test_slow_completion BEFORE UPDATE ON taskboard_jobs
       FOR EACH ROW EXECUTE FUNCTION taskboard_test_slow_completion()""",
)


async def test_a_group_that_fails_on_a_row_then_on_the_connection_loses_no_flight(
    db_url: str, conn: Any
) -> None:
    gate = asyncio.Event()

    async def held(ctx: JobContext) -> None:
        await gate.wait()

    registry = builtin_registry()
    registry.register(JobKind("held", lambda p: p, held))
    for statement in POISON_SETUP:
        await conn.execute(statement)
    ids = await enqueue_many(conn, registry, [NewJob("held") for _ in range(4)])
    poison = await enqueue(conn, registry, "noop")
    await conn.execute("INSERT INTO taskboard_fault_poison (id) VALUES (%s)", (poison,))
    slow = max(ids)  # likely completed last of the four: the others settle before it fails
    db = conn.info.dbname
    await conn.execute(f"ALTER DATABASE {db} SET taskboard_test.slow_id = {slow}")
    for statement in SLOW_ONCE:
        await conn.execute(statement)

    rec = Recorder()
    async with run_workers(
        db_url, "w", recorder=rec, registry=registry, lease_seconds=2, concurrency=4
    ) as (worker,):
        await wait_for(lambda: len(rec.of(Claimed)) >= 4, what="the four held jobs claimed")
        gate.set()  # four completions at once: one group, whose refill claim meets the poison
        await wait_for(
            lambda: {e.job_id for e in rec.of(Completed)} >= set(ids),
            timeout=20, what="every held job completed and reported",
        )
        assert not worker.task.done(), "the worker stopped"
        cur = await conn.execute(
            "SELECT count(*) FROM taskboard_jobs WHERE id = ANY(%s) AND completed_at IS NOT NULL",
            (ids,),
        )
        assert (await cur.fetchone())[0] == 4
    # Each completed once, none reported as rejected by its own earlier completion.
    completed = [e.job_id for e in rec.of(Completed) if e.job_id in ids]
    assert sorted(completed) == sorted(ids)
    assert not [e for e in rec.of(CompletionRejected) if e.job_id in ids]
    cur = await conn.execute("SELECT nextval('taskboard_test_slow_once')")
    assert (await cur.fetchone())[0] > 3, "the one-by-one completion never timed out"
