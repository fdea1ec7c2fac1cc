"""A worker that stalls past its lease may reclaim its *own* expired job: it then runs two
attempts of one job, with two tokens. Only the current token's completion may be reported
as a completion; the stale one is a rejected completion. (Found by the fault run: a
SIGSTOP between a claim and its handling, then the worker's next claim took the same job.)
"""

from __future__ import annotations

import asyncio
from typing import Any

from taskboard.core.engine.events import Claimed, Completed, CompletionRejected
from taskboard.core.kinds import JobContext, JobKind, builtin_registry
from taskboard.core.queue.jobs import enqueue
from taskboard.core.view.status import job_history

from tests.conftest import wait_for
from tests.harness import Recorder, run_workers


async def test_a_stale_attempt_of_a_job_reclaimed_by_the_same_worker_is_not_completed(
    db_url: str, conn: Any
) -> None:
    gate = asyncio.Event()

    async def gated(ctx: JobContext) -> None:
        await gate.wait()

    registry = builtin_registry()
    registry.register(JobKind("gated", lambda payload: {}, gated, cancel_safe=False))
    rec = Recorder()
    async with run_workers(db_url, "self", recorder=rec, registry=registry,
                           lease_seconds=1.0, pool_size=4) as [running]:
        worker = running.worker
        job_id = await enqueue(conn, registry, "gated", {})
        [first] = await wait_for(lambda: rec.of(Claimed, job_id=job_id), what="the claim")
        worker.pause()  # the stall: no renewal, and the lease runs out
        await asyncio.sleep(1.2)
        worker.resume()  # the claim loop takes the expired job again: a second token
        await wait_for(lambda: len(rec.of(Claimed, job_id=job_id)) == 2, what="the reclaim")
        second = rec.of(Claimed, job_id=job_id)[1]
        assert second.previous_token == first.token and second.token != first.token
        gate.set()  # both attempts finish together
        await wait_for(lambda: rec.of(Completed, job_id=job_id, token=second.token),
                       what="the current attempt's completion")
        await asyncio.sleep(0.3)  # a verdict on the stale attempt would have arrived by now
    completed = [e.token for e in rec.of(Completed, job_id=job_id)]
    rejected = [e.token for e in rec.of(CompletionRejected, job_id=job_id)]
    assert completed == [second.token], f"reported completed with tokens {completed}"
    assert set(rejected) <= {first.token}
    outcomes = {row["token"]: row["outcome"] for row in await job_history(conn, job_id)}
    assert outcomes[second.token] == "completed"
    # The stale attempt was fenced (rejected) or stopped before completing (lost).
    assert outcomes[first.token] in ("completion_rejected", "lease_lost")
    assert (outcomes[first.token] == "completion_rejected") == bool(rejected)
