"""What a fleet's close tells of its drain (the lines `taskboard-tui` prints after a quit),
and that a listener which fails cannot keep the drain from releasing its leases."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.fleet import DrainReport, FleetOptions, open_fleet

from tests.conftest import wait_for


async def _held(db_url: str, job_id: int) -> bool:
    async with await psycopg.AsyncConnection.connect(db_url) as c:
        cur = await c.execute("SELECT lease_token IS NOT NULL FROM taskboard_jobs WHERE id = %s",
                              (job_id,))
        return await cur.fetchone() == (True,)


@pytest.mark.parametrize("listener_fails", [False, True])
async def test_the_drain_is_told_as_it_starts_and_ends_and_releases_whatever_the_listener_does(
    db_url: str, monkeypatch: pytest.MonkeyPatch, listener_fails: bool
) -> None:
    monkeypatch.setenv("TASKBOARD_DATABASE_URL", db_url)
    options = FleetOptions(workers=1, settings=WorkerSettings(lease_seconds=5, pool_size=3,
                                                              drain_seconds=0.5))
    told: list[DrainReport] = []

    def listen(report: DrainReport) -> None:
        told.append(report)
        if listener_fails:
            raise RuntimeError("a listener with a bug")

    async with open_fleet(options, on_drain=listen) as opened:
        job_id = await opened.fleet.enqueue_sample("sleep")  # 5 s: longer than the drain
        await wait_for(lambda: _held(db_url, job_id), timeout=30, what="the sleep job claimed")
        # The worker's own count, not the row: a claim is committed before its answer is
        # adopted (CI saw the drain count 0 running, then release the job).
        await wait_for(lambda: sum(w.in_flight for w in opened.fleet.workers.values()) == 1,
                       timeout=30, what="the claim adopted")
    assert told == [DrainReport(1, 1, 0.5),
                    DrainReport(1, 1, 0.5, done=True, released=1)], told
    assert told[-1].otherwise == 0
    async with await psycopg.AsyncConnection.connect(db_url) as c:
        cur = await c.execute("SELECT lease_token, completed_at FROM taskboard_jobs WHERE id = %s",
                              (job_id,))
        row: Any = await cur.fetchone()
    assert row == (None, None)  # released: the next worker claims it at once
