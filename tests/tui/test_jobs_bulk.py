"""The dashboard's job lists act on everything they show (issue 26): `A` on the dead list
filtered to "billing" counts the matching jobs in the database, asks with that count, and
retries exactly those; `n` at the question changes nothing."""

from __future__ import annotations

from typing import Any

import psycopg
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.fleet import Fleet
from taskboard.core.kinds import builtin_registry
from taskboard.core.runtime.db import Database
from taskboard.tui.screens.confirm import ConfirmScreen
from taskboard.tui.screens.jobs import JobsScreen

from tests.test_bulk_commands import acted_on, dead_jobs
from tests.tui.fakes_screens import hosting

Conn = psycopg.AsyncConnection[Any]


async def test_a_on_the_filtered_dead_list_retries_exactly_what_it_shows(
    db_url: str, conn: Conn
) -> None:
    billing = await dead_jobs(conn, "billing", 230, "5 minutes", "stripe: 503")
    emails = await dead_jobs(conn, "email", 20, "5 minutes", "smtp: 421")
    fleet = Fleet(Database(db_url), None, builtin_registry(),
                  settings=WorkerSettings(lease_seconds=5), name_prefix="bulk")
    try:
        async with hosting(size=(80, 24)) as run:
            screen = JobsScreen(fleet, "dead", refresh_seconds=0)  # type: ignore[arg-type]
            run.app.push_screen(screen)
            await run.until(lambda: len(screen.rows) == 200, "the dead list (200 shown)")
            await run.pilot.press("slash", *"billing", "enter")
            await run.until(lambda: screen.needle == "billing" and not screen._reading
                            and all(r.kind == "billing" for r in screen.rows), "the filter")

            # No: nothing changes.
            await run.pilot.press("A")
            await run.until(lambda: isinstance(run.app.screen, ConfirmScreen), "the question")
            confirm = run.app.screen
            assert isinstance(confirm, ConfirmScreen)
            assert "Retry 230 dead jobs matching 'billing'" in confirm.question, confirm.question
            await run.pilot.press("n")
            await run.until(lambda: run.app.screen is screen, "back on the list")
            assert await acted_on(conn, "retried") == []

            # Yes: the 230 billing jobs, more than the 200 the list shows, and no email.
            await run.pilot.press("A")
            await run.until(lambda: isinstance(run.app.screen, ConfirmScreen), "the question")
            await run.pilot.press("y")
            await run.until(lambda: any("Retried 230 dead jobs" in n.notification.message
                                        for n in run.notifications), "the result")
    finally:
        await fleet.close()
    assert await acted_on(conn, "retried") == billing
    cur = await conn.execute(
        "SELECT count(*) FROM taskboard_jobs WHERE id = ANY(%s) AND failed_at IS NOT NULL",
        (emails,),
    )
    assert await cur.fetchone() == (20,)
