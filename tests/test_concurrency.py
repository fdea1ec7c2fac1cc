"""Concurrency beyond the pool: kinds whose handlers hold no connection run `concurrency` at
once whatever the pool size; kinds that write to the database still hold one connection
each and never more than pool - 2 at once; one renewal statement per interval renews every
lease; the fence holds for a batch of stalled completions."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from taskboard.core.engine.events import (
    Claimed,
    Completed,
    CompletionRejected,
    Quarantined,
    RenewalFailed,
)
from taskboard.core.kinds import JobContext, JobKind, builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue_many
from taskboard.core.view.status import job_history

from tests.conftest import wait_for
from tests.harness import Recorder, run_workers
from tests.test_cli import assert_one_line_error, run_cli


class InFlight:
    """Jobs held at once, from the workers' events: now and at most, per kind class."""

    def __init__(self, writers: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.writers = writers
        self.now = {"all": 0, "writes": 0}
        self.peak = {"all": 0, "writes": 0}
        self._kinds: dict[str, str] = {}

    def __call__(self, event: Any) -> None:
        if isinstance(event, Claimed):
            self._kinds[event.token] = event.kind
            self._move(event.kind, +1)
        elif isinstance(event, Completed | CompletionRejected):
            self._move(self._kinds[event.token], -1)

    def _move(self, kind: str, step: int) -> None:
        classes = ["all", "writes"] if kind in self.writers else ["all"]
        for c in classes:
            self.now[c] += step
            self.peak[c] = max(self.peak[c], self.now[c])


def sleeping_writer() -> JobKind:
    """Holds a connection (writes_db) and sleeps off the database."""

    async def handler(ctx: JobContext) -> None:
        assert ctx.conn is not None
        await asyncio.sleep(float(ctx.payload["seconds"]))

    return JobKind("sleepw", lambda p: dict(p), handler, writes_db=True)


async def test_sixty_jobs_that_hold_no_connection_all_run_at_once_on_a_pool_of_four(
    db_url, conn
):
    rec, flying = Recorder(), InFlight()
    ids = await enqueue_many(
        conn, builtin_registry(), [NewJob("sleep", {"seconds": 0.5}) for _ in range(60)]
    )
    async with run_workers(db_url, "w", recorder=rec, pool_size=4, lease_seconds=5) as [w]:
        w.worker.bus.subscribe(flying)
        # Serially, or two at a time as pool - 2 allowed, this takes 15-30 s.
        await wait_for(lambda: len(rec.of(Completed)) == 60, timeout=8, what="60 completions")
    assert sorted(e.job_id for e in rec.of(Completed)) == ids
    assert flying.peak["all"] == 60
    assert rec.of(CompletionRejected) == [] and rec.of(RenewalFailed) == []


async def test_concurrency_caps_jobs_at_once_whatever_the_pool(db_url, conn):
    rec, flying = Recorder(), InFlight()
    await enqueue_many(
        conn, builtin_registry(), [NewJob("sleep", {"seconds": 0.2}) for _ in range(12)]
    )
    async with run_workers(
        db_url, "w", recorder=rec, pool_size=10, concurrency=3, lease_seconds=5
    ) as [w]:
        w.worker.bus.subscribe(flying)
        await wait_for(lambda: len(rec.of(Completed)) == 12, timeout=15, what="12 completions")
    assert flying.peak["all"] == 3


async def test_jobs_that_write_never_exceed_pool_minus_two_beside_many_that_do_not(
    db_url, conn
):
    """One queue, both classes interleaved: the writers take at most the two connections a
    pool of four leaves them, and the others are not kept waiting behind them."""
    registry = builtin_registry()
    registry.register(sleeping_writer())
    jobs = []
    for i in range(40):
        jobs.append(NewJob("sleepw", {"seconds": 0.3}) if i % 4 == 0
                    else NewJob("sleep", {"seconds": 0.3}))
    ids = await enqueue_many(conn, registry, jobs)
    rec, flying = Recorder(), InFlight({"sleepw"})
    db_peak = 0
    async with run_workers(
        db_url, "w", recorder=rec, registry=registry, pool_size=4, lease_seconds=5
    ) as [w]:
        w.worker.bus.subscribe(flying)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while len(rec.of(Completed)) < 40:
            assert loop.time() < deadline, f"{len(rec.of(Completed))} of 40 completed"
            cur = await conn.execute(
                "SELECT count(*) FROM taskboard_jobs"
                " WHERE lease_token IS NOT NULL AND kind = 'sleepw'"
            )
            db_peak = max(db_peak, (await cur.fetchone())[0])
            await asyncio.sleep(0.01)
    assert sorted(e.job_id for e in rec.of(Completed)) == ids
    assert flying.peak["writes"] == 2 and db_peak <= 2
    assert flying.peak["all"] >= 30  # the 30 that hold nothing ran together


RENEWAL_COUNTER = """
CREATE TABLE renewal_statements (rows integer NOT NULL, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION count_renewals() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE renewed integer;
BEGIN
    -- A renewal keeps the token and moves the deadline later; claims and completions
    -- change the token.
    SELECT count(*) INTO renewed FROM o JOIN n ON n.id = o.id
     WHERE n.lease_token = o.lease_token AND n.lease_expires_at > o.lease_expires_at;
    IF renewed > 0 THEN
        INSERT INTO renewal_statements (rows) VALUES (renewed);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER count_renewals AFTER UPDATE ON taskboard_jobs
    REFERENCING OLD TABLE AS o NEW TABLE AS n
    FOR EACH STATEMENT EXECUTE FUNCTION count_renewals();
"""


async def test_one_renewal_statement_per_interval_renews_over_a_hundred_leases(db_url, conn):
    """Counted by the database (a statement trigger), not by the worker's own account."""
    await conn.execute(RENEWAL_COUNTER)
    rec = Recorder()
    ids = await enqueue_many(
        conn, builtin_registry(), [NewJob("sleep", {"seconds": 3.0}) for _ in range(120)]
    )
    lease, interval = 3.0, 0.5
    async with run_workers(
        db_url, "w", recorder=rec, pool_size=3, concurrency=150, lease_seconds=lease,
        renew_every=interval,
    ):
        await wait_for(lambda: len(rec.of(Claimed)) == 120, timeout=5, what="120 claims")
        await wait_for(lambda: len(rec.of(Completed)) == 120, timeout=15, what="completions")
    cur = await conn.execute("SELECT rows, at FROM renewal_statements ORDER BY at")
    renewals = await cur.fetchall()
    # The handlers run ~3 s; every lease is renewed at each 0.5 s interval, by one statement.
    assert 3 <= len(renewals) <= 3.0 / interval + 2, renewals
    assert max(rows for rows, _ in renewals) == 120
    gaps = [(b - a).total_seconds() for (_, a), (_, b) in itertools.pairwise(renewals)]
    assert min(gaps) > interval / 2, gaps
    assert rec.of(RenewalFailed) == []
    assert sorted(e.job_id for e in rec.of(Completed)) == ids


async def test_a_batch_of_stalled_completions_that_hold_no_connection_is_fenced(db_url, conn):
    """The article's timeline, thirty at once on a pool of three: A finished the work and
    stalled before completing; B reclaimed and completed every job; A's grouped completions
    changed zero rows, each with its own verdict."""
    registry = builtin_registry()

    async def work_then_hold(ctx: JobContext) -> None:
        ctx.hold_completion(0.8)

    registry.register(JobKind("held", lambda p: dict(p), work_then_hold))
    ids = await enqueue_many(conn, registry, [NewJob("held") for _ in range(30)])
    rec = Recorder()
    async with run_workers(
        db_url, "a", recorder=rec, registry=registry, pool_size=3, lease_seconds=1.0
    ) as [a]:
        await wait_for(lambda: len(rec.of(Claimed, worker_id="a")) == 30, what="A claims 30")
        a.worker.pause()
        async with run_workers(
            db_url, "b", recorder=rec, registry=registry, pool_size=3, lease_seconds=30
        ):
            await wait_for(lambda: len(rec.of(Completed, worker_id="b")) == 30, timeout=15,
                           what="B completes all")
            a.worker.resume()
            await wait_for(lambda: len(rec.of(CompletionRejected, worker_id="a")) == 30,
                           timeout=10, what="A fenced 30 times")
    assert rec.of(Completed, worker_id="a") == []
    for job_id in ids:
        history = await job_history(conn, job_id)
        assert [h["outcome"] for h in history] == ["completion_rejected", "completed"]


async def test_a_row_that_breaks_a_claim_of_a_hundred_is_found_deep_in_the_batch(db_url, conn):
    """The probe tries as many rows as the failed claim took (it tried 20: a poison row
    45th in the queue broke every claim of 100 and was never found)."""
    ids = await enqueue_many(conn, builtin_registry(), [NewJob("noop") for _ in range(60)])
    poison = ids[44]
    await conn.execute(
        "CREATE FUNCTION refuse_claim() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN IF NEW.lease_token IS NOT NULL AND NEW.id = " + str(poison) + " THEN"
        "   RAISE EXCEPTION 'poison row %', NEW.id; END IF; RETURN NEW; END $$"
    )
    await conn.execute(
        "CREATE TRIGGER refuse_claim BEFORE UPDATE ON taskboard_jobs"
        " FOR EACH ROW EXECUTE FUNCTION refuse_claim()"
    )
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, lease_seconds=5.0, pool_size=4):
        await wait_for(lambda: rec.of(Quarantined, job_id=poison), timeout=10, what="quarantine")
        await wait_for(lambda: len(rec.of(Completed)) == 59, timeout=10, what="59 completions")
    assert sorted(e.job_id for e in rec.of(Completed)) == [i for i in ids if i != poison]


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("0", "concurrency must be between 1 and 10000"),
        ("10001", "concurrency must be between 1 and 10000"),
        ("-3", "concurrency must be between 1 and 10000"),
        ("2.5", "not an integer"),
    ],
)
def test_out_of_range_concurrency_is_refused_in_one_line(db_url, value, needle):
    proc = run_cli(db_url, "worker", "--id", "bounds", "--concurrency", value, timeout=60)
    assert_one_line_error(proc, needle)
    assert proc.stdout == ""
