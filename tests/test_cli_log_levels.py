"""`taskboard worker`'s log at its defaults: what an operator acts on at INFO (start, stop, a
reclaim, a dead job...) one line each, a summary line instead of a line per routine claim
and completion, and those per-job lines back with `--log-every-job` (or at DEBUG). A
logger that would drop the routine events is not sent them: the engine does not build
them at all."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import psycopg
import pytest
from taskboard.core.engine import leases
from taskboard.core.engine.events import Claimed, Completed, Dead, EventBus, is_routine
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker import Worker
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import enqueue
from taskboard.core.runtime.log_summary import JobSummary
from taskboard.core.runtime.logs import EventLogger

from tests.harness import Recorder
from tests.test_cli import run_cli

from .conftest import wait_for

REG = builtin_registry()
Conn = psycopg.AsyncConnection[Any]


def _lines(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def _events(lines: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("event") == name]


async def _reclaimable_and_dead(conn: Conn) -> tuple[int, str, int]:
    """A job whose holder's lease has run out (the next claim is a reclaim), and a row
    written by hand with a payload its kind refuses (it becomes dead)."""
    held = await enqueue(conn, REG, "noop")
    [job] = await leases.claim(conn, worker_id="w-old", limit=1, lease_seconds=30,
                               queues=["default"], kinds=REG.names())
    await conn.execute("UPDATE taskboard_jobs SET lease_expires_at = now() - interval '1 s'"
                       " WHERE id = %s", (held,))
    cur = await conn.execute("INSERT INTO taskboard_jobs (kind, payload) VALUES "
                             "('sleep', '{\"seconds\": \"soon\"}') RETURNING id")
    row = await cur.fetchone()
    assert row is not None
    return held, str(job.token), int(row[0])


async def test_at_defaults_info_tells_the_story_without_a_line_per_routine_job(
    db_url: str, conn: Conn
) -> None:
    held, old_token, bad = await _reclaimable_and_dead(conn)
    for _ in range(5):
        await enqueue(conn, REG, "noop")
    proc = run_cli(db_url, "worker", "--burst", "--id", "quiet", "--pool-size", "4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = _lines(proc.stderr)
    assert not _events(lines, "completed"), proc.stderr
    # The one claim at INFO is the reclaim: news (its holder lost the lease).
    [reclaim] = _events(lines, "claimed")
    assert (reclaim["job_id"], reclaim["previous_token"]) == (held, old_token)
    [dead] = _events(lines, "dead")
    assert dead["job_id"] == bad and dead["level"] == "info"
    assert len(_events(lines, "worker_started")) == len(_events(lines, "worker_stopped")) == 1
    # The run ends with what it did: 6 no-ops completed, the bad row dead.
    [summary] = _events(lines, "jobs_summary")
    assert (summary["claimed"], summary["completed"], summary["dead"]) == (7, 6, 1), summary
    assert "failed" not in summary  # failed counts the failures that will be retried
    assert summary["worker_id"] == "quiet" and summary["level"] == "info"
    assert summary["completed_by_kind"] == {"noop": 6}
    assert all(line["level"] == "info" for line in lines), proc.stderr


async def test_log_every_job_writes_a_claim_and_a_completion_per_job(
    db_url: str, conn: Conn
) -> None:
    jobs = [await enqueue(conn, REG, "noop") for _ in range(3)]
    proc = run_cli(db_url, "worker", "--burst", "--id", "chatty", "--pool-size", "4",
                   "--log-every-job", "--log-summary", "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = _lines(proc.stderr)
    assert sorted(e["job_id"] for e in _events(lines, "claimed")) == jobs
    completed = _events(lines, "completed")
    assert sorted(e["job_id"] for e in completed) == jobs
    assert all(e["level"] == "info" for e in completed)
    assert not _events(lines, "jobs_summary")  # --log-summary 0: none, not even the last


async def test_debug_level_writes_the_per_job_lines_at_debug(db_url: str, conn: Conn) -> None:
    job = await enqueue(conn, REG, "noop")
    proc = run_cli(db_url, "worker", "--burst", "--id", "dbg", "--pool-size", "4",
                   "--log-level", "debug")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = _lines(proc.stderr)
    [completed] = _events(lines, "completed")
    assert (completed["job_id"], completed["level"]) == (job, "debug")


def test_a_bad_summary_interval_is_one_line_exit_2() -> None:
    proc = run_cli(None, "worker", "--log-summary", "-1")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "--log-summary" in line and "0 to 86400" in line


def test_the_bus_sends_routine_events_only_to_subscribers_that_want_every_job() -> None:
    bus = EventBus()
    everything, notable = Recorder(), Recorder()
    bus.subscribe(everything)
    assert bus.listened_every_job
    unsubscribe = bus.subscribe(notable, every_job=False)
    first = Claimed("w", 1, "noop", "t1", 1, None)  # type: ignore[arg-type]
    reclaim = Claimed("w", 2, "noop", "t2", 2, None, previous_token="t0")  # type: ignore[arg-type]
    done, dead = Completed("w", 1, "t1", 0.1), Dead("w", 3, "t3", "boom")
    assert [is_routine(e) for e in (first, reclaim, done, dead)] == [True, False, True, False]
    for event in (first, reclaim, done, dead):
        bus.emit(event)
    assert everything.events == [first, reclaim, done, dead]
    assert notable.events == [reclaim, dead]
    unsubscribe()
    assert bus.subscribers == [everything] and bus.every_job == [everything]
    bus2 = EventBus()
    bus2.subscribe(notable, every_job=False)
    assert bus2.listened and not bus2.listened_every_job


async def test_the_engine_builds_no_routine_event_nobody_wants(db_url: str, conn: Conn) -> None:
    """With only a subscriber that declines routine events, a worker that completes jobs
    emits none (it would have built two per job), and still tells of a reclaim."""
    held, _, bad = await _reclaimable_and_dead(conn)
    jobs = [await enqueue(conn, REG, "noop") for _ in range(3)]
    notable = Recorder()
    built: list[type[Any]] = []
    bus_emit = EventBus.emit

    def counting_emit(self: EventBus, event: Any) -> None:
        built.append(type(event))
        bus_emit(self, event)

    bus = EventBus()
    bus.subscribe(notable, every_job=False)  # before the worker claims anything
    worker = Worker(db_url, registry=REG, bus=bus,
                    settings=WorkerSettings(worker_id="w", lease_seconds=5))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(EventBus, "emit", counting_emit)
        task = asyncio.create_task(worker.run())
        try:
            await wait_for(lambda: _all_done(conn, [held, *jobs, bad]), timeout=15,
                           what="every job finished")
        finally:
            worker.drain()
            await asyncio.wait_for(task, 30)
    assert Completed not in built
    assert built.count(Claimed) == 1  # the reclaim, and only it, was built
    assert [e.job_id for e in notable.of(Claimed)] == [held]
    assert [e.job_id for e in notable.of(Dead)] == [bad]  # news, sent as before


async def _all_done(conn: Conn, jobs: list[int]) -> bool:
    cur = await conn.execute("SELECT count(*) FROM taskboard_jobs WHERE id = ANY(%s)"
                             " AND (completed_at IS NOT NULL OR failed_at IS NOT NULL)", (jobs,))
    row = await cur.fetchone()
    return row is not None and row[0] == len(jobs)


def test_the_event_logger_declines_routine_events_unless_they_would_be_written() -> None:
    logger = logging.getLogger("taskboard.test-levels")
    logger.setLevel(logging.INFO)
    assert not EventLogger(logger).wants_every_job
    assert EventLogger(logger, every_job=True).wants_every_job
    logger.setLevel(logging.DEBUG)
    assert EventLogger(logger).wants_every_job


def test_a_summary_counts_the_interval_and_is_silent_when_nothing_happened() -> None:
    from taskboard.core.engine.outcomes import WorkerCounters

    counters = WorkerCounters()
    now = [100.0]
    logged: list[dict[str, Any]] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.fields)  # type: ignore[attr-defined]

    logger = logging.getLogger("taskboard.test-summary")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(Capture())
    summary = JobSummary("w1", lambda: counters, 60, logger, clock=lambda: now[0])
    summary.log()
    assert logged == []  # nothing yet: no line
    counters.claimed, counters.completed, counters.failed = 120, 118, 2
    counters.completed_by_kind.update({"noop": 100, "email": 18})
    now[0] = 160.0
    summary.log()
    counters.completed += 2
    counters.completed_by_kind["email"] += 2
    now[0] = 220.0
    summary.log()
    now[0] = 280.0
    summary.log()  # idle: no line
    assert logged == [
        {"event": "jobs_summary", "worker_id": "w1", "seconds": 60.0, "claimed": 120,
         "completed": 118, "failed": 2, "completed_by_kind": {"email": 18, "noop": 100},
         "completed_per_second": 1.97},
        {"event": "jobs_summary", "worker_id": "w1", "seconds": 60.0, "completed": 2,
         "completed_by_kind": {"email": 2}, "completed_per_second": 0.03},
    ]
