"""The dashboard's health screen (issue 26): against a real fleet whose jobs churn while
another session holds a transaction open, it turns amber, names the holder (pid and
application) and says what to do, at 80x24 and wider."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.fleet import Fleet
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue_many
from taskboard.core.runtime.db import Database
from taskboard.core.view.health import Thresholds
from taskboard.tui.screens.health import HealthScreen
from taskboard.tui.screens.reading import ReadingLine

from tests.conftest import wait_for
from tests.tui.fakes_screens import LARGE, SMALL, health_scene, hosting, shown_text

JOBS = 200
LOW = Thresholds(holder_amber_seconds=0.5, holder_red_seconds=3600)


@pytest.mark.parametrize("size", [SMALL, LARGE])
async def test_health_screen_names_the_held_transaction_while_jobs_churn(
    db_url: str, conn: Any, size: tuple[int, int]
) -> None:
    registry = builtin_registry()
    fleet = Fleet(
        Database(db_url), None, registry,
        settings=WorkerSettings(lease_seconds=5, drain_seconds=0.5, poll_seconds=0.2),
        name_prefix="health",
    )
    fleet.health_thresholds = LOW
    held = await psycopg.AsyncConnection.connect(
        db_url, autocommit=True, application_name="stuck-export"
    )
    await fleet.start(1)
    try:
        await held.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await held.execute("SELECT 1 FROM taskboard_jobs LIMIT 1")
        ids = await enqueue_many(conn, registry, [NewJob("noop") for _ in range(JOBS)])

        async def churned() -> bool:
            cur = await conn.execute(
                "SELECT count(*) FROM taskboard_jobs WHERE id = ANY(%s)"
                " AND completed_at IS NOT NULL", (ids,),
            )
            row = await cur.fetchone()
            return bool(row and row[0] == JOBS)

        await wait_for(churned, timeout=30, what="the fleet to run the jobs")
        pid = held.info.backend_pid
        async with hosting(size=size) as run:
            screen = HealthScreen(fleet, every=None)
            run.app.push_screen(screen)
            await run.until(lambda: screen.report is not None, "the first reading")
            await wait_for(lambda: _amber(screen), timeout=10, what="an amber reading")
            await run.pilot.pause()
            assert screen.report is not None and screen.report.holder is not None
            assert screen.report.holder.pid == pid
            advice = " ".join(shown_text(screen.query_one("#health-advice")).split())
            readings = shown_text(screen.query_one("#health-readings"))
            status = shown_text(screen.query_one(ReadingLine))
    finally:
        await held.close()
        await fleet.close()
    assert "AMBER" in status, status
    assert f"pg_terminate_backend({pid})" in advice and "stuck-export" in advice, advice
    assert f"pid {pid}" in " ".join(readings.split()), readings
    assert "taskboard_jobs" in readings


def _amber(screen: HealthScreen) -> bool:
    if screen.report is not None and screen.report.level == "amber":
        return True
    if not screen.reading:
        screen.action_reload()
    return False


SnapCompare = Callable[..., bool]


@pytest.mark.parametrize("size", [SMALL, LARGE])
def test_snapshot(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    scene = health_scene(size)
    assert snap_compare(scene.app, terminal_size=scene.size, run_before=scene.prepare)
