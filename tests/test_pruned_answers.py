"""A grouped completion commits, its answer is lost, and a prune deletes the jobs (and their
history) before the worker asks again: the worker must say neither "completed" (it cannot
know) nor "rejected" (its completion was accepted). A 10-minute soak (seed 20261210) saw a
worker stopped 3.9 s right after its commit report two such jobs as rejected: an operator
prune with a 3 s retention had deleted them 3.8 s after they completed."""

from __future__ import annotations

from typing import Any

from taskboard.core.engine import leases
from taskboard.core.engine.events import Completed, CompletionRejected, LeaseGivenUp
from taskboard.core.kinds import builtin_registry
from taskboard.core.operations.retention import Retention, prune
from taskboard.core.queue.jobs import NewJob, enqueue_many

from tests.conftest import wait_for
from tests.test_overlap import answers_lost

JOBS = 20


async def test_a_completion_of_a_pruned_job_is_neither_done_nor_rejected(conn: Any) -> None:
    """The statement's own verdict: `gone`, for a lease whose job's row no longer exists."""
    [job_id] = await enqueue_many(conn, builtin_registry(), [NewJob("noop")])
    [job] = await leases.claim(conn, worker_id="w", limit=1, lease_seconds=30,
                               queues=["default"], kinds=["noop"])
    assert job.id == job_id
    assert await leases.complete_many(conn, [(job.id, job.token)]) == {
        (job.id, job.token): leases.Verdict.DONE}
    # The same completion again: its first try's commit is read from the history.
    assert await leases.complete_many(conn, [(job.id, job.token)]) == {
        (job.id, job.token): leases.Verdict.DONE}
    done = await prune(conn, Retention.all_older_than(0))
    assert done.jobs == 1
    assert await leases.complete_many(conn, [(job.id, job.token)]) == {
        (job.id, job.token): leases.Verdict.GONE}


async def test_a_worker_whose_answer_was_lost_and_jobs_pruned_reports_them_lost(
    db_url: str, conn: Any
) -> None:
    async with answers_lost(db_url, conn, jobs=JOBS, engine_connections=1, groups=1) as (
        ids, rec
    ):
        pruned = await prune(conn, Retention.all_older_than(0))
        assert pruned.jobs == JOBS
        await wait_for(lambda: len(rec.of(LeaseGivenUp)) == JOBS, timeout=20,
                       what="every flight settled after the lost answer")
    assert not rec.of(Completed) and not rec.of(CompletionRejected)
    given_up = rec.of(LeaseGivenUp)
    assert sorted(e.job_id for e in given_up) == sorted(ids)
    assert all("pruned before this completion's answer was read" in e.reason
               for e in given_up), given_up[0]
