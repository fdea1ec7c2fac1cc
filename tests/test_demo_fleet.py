"""The demo's fleet (issue 13): its own database, a reset that starts the story clean, workers
named as the story names them, and A's rejected completion stamped when A came back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.fleet import Fleet
from taskboard.core.fleet.opening import FleetOptions, open_fleet
from taskboard.core.kinds import builtin_registry
from taskboard.core.runtime.db import DEMO_DATABASE, Database, demo_database, ensure_schema
from taskboard.core.training.kinds import FIRST_CLAIMS, StoryCue
from taskboard.core.training.notes import came_back
from taskboard.core.view.board import AttemptRow, JobDetail
from taskboard.core.view.control import CommandRefused

from tests.demo_fleet import LEASE, demo_fleet, within

PAUSE = 2.0
"""How long A stays stalled after B's claim before the test resumes it, seconds."""


async def db_now(conn: psycopg.AsyncConnection[Any]) -> datetime:
    cur = await conn.execute("SELECT clock_timestamp()")
    row = await cur.fetchone()
    assert row is not None and isinstance(row[0], datetime)
    return row[0]


def attempts(detail: JobDetail) -> dict[int, AttemptRow]:
    return {a.ordinal: a for a in detail.attempts}


async def test_a_rejected_completion_is_stamped_when_a_came_back_not_at_the_reclaim(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    # Defect 4: A's attempt ended_at equalled B's claimed_at, losing the proof that A was late.
    cue = StoryCue()
    async with demo_fleet(db_url, cue=cue) as fleet:
        job = await fleet.enqueue_sample("email")
        held = await within(lambda: _held(fleet, job), "a worker holds the email job")
        a = held.holder
        assert a is not None
        # Paused only once its send is on record: paused before (a loaded machine's SMTP
        # round trip), A would stop inside its handler, not at its completion, and come
        # back to a lease lost, not a completion refused (the demo tells that story too).
        await within(lambda: _sent(fleet, job), "A's send is on record")
        await fleet.pause(a)
        cue.let_go(FIRST_CLAIMS)  # A returns from its handler and stops before the completion
        detail = await within(
            lambda: _reclaimed(fleet, job), "another worker reclaims it", timeout=3 * LEASE + 5
        )
        b_claimed = attempts(detail)[2].claimed_at
        await within(
            lambda: _later(conn, b_claimed, PAUSE), f"{PAUSE}s after B's claim", timeout=PAUSE + 5
        )
        resumed_at = await db_now(conn)
        await fleet.resume(a)
        detail = await within(
            lambda: _a_back(fleet, job), "A comes back and meets the fence", timeout=10
        )
    first, second = attempts(detail)[1], attempts(detail)[2]
    assert (first.worker, second.worker) != (a, a)
    assert first.outcome == "completion_rejected"
    assert first.superseded_at == second.claimed_at
    assert first.ended_at is not None
    # Stamped when A came back: after the resume, so later than B's claim by about the pause.
    assert resumed_at <= first.ended_at
    assert (first.ended_at - resumed_at).total_seconds() < 1.5
    assert (first.ended_at - second.claimed_at).total_seconds() >= PAUSE


async def _held(fleet: Fleet, job: int) -> JobDetail | None:
    detail = await fleet.job_detail(job)
    return detail if detail.holder is not None else None


async def _sent(fleet: Fleet, job: int) -> JobDetail | None:
    detail = await fleet.job_detail(job)
    return detail if detail.emails else None


async def _reclaimed(fleet: Fleet, job: int) -> JobDetail | None:
    detail = await fleet.job_detail(job)
    return detail if len(detail.attempts) >= 2 else None


async def _later(conn: psycopg.AsyncConnection[Any], moment: datetime, seconds: float) -> bool:
    return (await db_now(conn) - moment).total_seconds() >= seconds


async def _a_back(fleet: Fleet, job: int) -> JobDetail | None:
    detail = await fleet.job_detail(job)
    return detail if came_back(attempts(detail)[1]) else None


@pytest.fixture
async def demo_url(pg_server_url: str) -> AsyncIterator[str]:
    """The demo's own database on the test server, as `taskboard-tui --demo` makes it."""
    await _drop_demo(pg_server_url)
    demo = await demo_database(Database(pg_server_url))
    await ensure_schema(demo.url)
    try:
        yield demo.url
    finally:
        await _drop_demo(pg_server_url)


async def _drop_demo(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f"DROP DATABASE IF EXISTS {DEMO_DATABASE} WITH (FORCE)")


async def test_the_demo_never_sees_a_normal_runs_jobs_and_its_reset_leaves_them_alone(
    db_url: str, demo_url: str
) -> None:
    # Defect 5: --demo used the normal database; old workers, dead jobs and failures showed.
    assert conninfo_to_dict(demo_url)["dbname"] == DEMO_DATABASE
    normal = Fleet(
        Database(db_url),
        None,
        builtin_registry(),
        settings=WorkerSettings(lease_seconds=30, drain_seconds=0.5),
        name_prefix="ops",
        sample_sleep_seconds=30,
    )
    await normal.start(1)
    try:
        async with demo_fleet(demo_url, workers=1) as demo:
            sleeper = await normal.enqueue_sample("sleep")
            mailer = await demo.enqueue_sample("email")
            await within(lambda: _claimed(normal, "sleep"), "the normal run's claim")
            await within(lambda: _claimed(demo, "email"), "the demo's claim")
            seen_normal, seen_demo = await normal.refresh(), await demo.refresh()
            assert [w.id for w in seen_normal.workers] == ["ops-a"]
            assert [w.id for w in seen_demo.workers] == ["worker-a"]
            assert {c.kind for c in seen_normal.claims} == {"sleep"}
            assert {c.kind for c in seen_demo.claims} == {"email"}

            await demo.reset_demo(workers=2)
            after = await demo.refresh()
            assert [w.id for w in after.workers] == ["worker-a", "worker-b"]
            assert after.claims == () and after.failures == () and after.dead == ()
            assert after.counts.pending == after.counts.completed == 0
            with pytest.raises(CommandRefused, match="does not exist"):
                await demo.job_detail(mailer)
            # Ids go on after a reset: no idempotency key of the old story is reused.
            assert await demo.enqueue_sample("email") > mailer

            untouched = await normal.job_detail(sleeper)
            assert untouched.state == "running" and untouched.holder == "ops-a"
            with pytest.raises(CommandRefused, match="only the demo's own database"):
                await normal.reset_demo()
    finally:
        await normal.close()


async def _claimed(fleet: Fleet, kind: str) -> bool:
    return any(c.kind == kind for c in (await fleet.refresh()).claims)


def _demo(
    monkeypatch: pytest.MonkeyPatch, server_url: str, workers: int, room: str | None = None
) -> FleetOptions:
    """`taskboard tui --demo` (`--room`) options, the server named by the environment."""
    monkeypatch.setenv("TASKBOARD_DATABASE_URL", server_url)
    settings = WorkerSettings(lease_seconds=LEASE, drain_seconds=0.5)
    return FleetOptions(workers=workers, settings=settings, demo=True, room=room)


async def test_taskboard_tui_demo_opens_its_own_database_with_workers_a_and_b(
    pg_server_url: str, demo_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Defect 13: the narration's A and B must be the names on the board.
    options = _demo(monkeypatch, pg_server_url, workers=2)
    async with open_fleet(options) as opened:
        assert conninfo_to_dict(opened.database.url)["dbname"] == DEMO_DATABASE
        board = await opened.fleet.refresh()
        assert board.mode == "demo"
        assert [w.id for w in board.workers] == ["worker-a", "worker-b"]
        assert opened.scenario is not None


async def test_a_new_demo_starts_from_an_empty_story(
    pg_server_url: str, demo_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 26: a new --demo showed the previous run's jobs and rejected completion until R.
    options = _demo(monkeypatch, pg_server_url, workers=1)
    async with open_fleet(options) as opened:
        job = await opened.fleet.enqueue_sample("email")
        await within(lambda: _claimed(opened.fleet, "email"), "the email job claimed")
    async with await psycopg.AsyncConnection.connect(demo_url) as conn:
        cur = await conn.execute("SELECT count(*) FROM taskboard_jobs WHERE id = %s", (job,))
        assert (await cur.fetchone()) == (1,)  # the old story is there until a new one starts
    async with open_fleet(options) as opened:
        board = await opened.fleet.refresh()
        assert board.claims == () and board.failures == () and board.dead == ()
        assert board.counts.pending == board.counts.completed == 0
        assert [w.id for w in board.workers] == ["worker-a"]


async def test_a_browser_sessions_story_has_a_database_of_its_own_dropped_after(
    pg_server_url: str, demo_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = _demo(monkeypatch, pg_server_url, workers=2, room="7ab12")
    async with open_fleet(options) as opened:
        assert conninfo_to_dict(opened.database.url)["dbname"] == "taskboard_demo_s7ab12"
        assert conninfo_to_dict(opened.server_url)["dbname"] != "taskboard_demo_s7ab12"
        await opened.fleet.enqueue_sample("email")
        board = await opened.fleet.refresh()
        assert [w.id for w in board.workers] == ["worker-a", "worker-b"]
        async with await psycopg.AsyncConnection.connect(demo_url) as conn:
            cur = await conn.execute("SELECT count(*) FROM taskboard_jobs")
            assert (await cur.fetchone()) == (0,)  # the shared demo database saw nothing
    async with await psycopg.AsyncConnection.connect(pg_server_url) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_database WHERE datname = 'taskboard_demo_s7ab12'"
        )
        assert (await cur.fetchone()) == (0,)
