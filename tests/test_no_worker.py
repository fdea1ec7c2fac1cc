"""Jobs no live worker can run are said, not left to wait in silence (issue 26): `status`
warns for a queue no live worker works and for a kind none runs; `queue pause` of a name
that never held a job warns; the dashboard shows the first warning under its header."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import psycopg
from taskboard.core.view.board import OrphanKind
from taskboard.tui.widgets.banner import NoWorkerLine

from tests.conftest import wait_for
from tests.harness import run_workers
from tests.test_cli import run_cli
from tests.tui.helpers import running
from tests.tui.sample_board import FixedBoard, main_board
from tests.tui.sample_scenes import settle

Conn = psycopg.AsyncConnection[Any]


async def test_status_warns_for_a_queue_nobody_works_and_a_kind_nobody_runs(
    db_url: str, conn: Conn
) -> None:
    await conn.execute(
        "INSERT INTO taskboard_jobs (kind, queue, payload) VALUES"
        " ('noop', 'reports', '{}'), ('noop', 'reports', '{}'), ('resize', 'default', '{}')"
    )
    async with run_workers(db_url, "only-default", queues=["default"]):
        await wait_for(
            lambda: _claimed_nothing(conn), what="the worker to leave the orphans alone"
        )
        proc = await asyncio.to_thread(run_cli, db_url, "status")
        as_json = await asyncio.to_thread(run_cli, db_url, "status", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "warning: no live worker works queue 'reports': 2 jobs wait (noop)" in proc.stdout, (
        proc.stdout
    )
    assert "warning: no live worker runs kind 'resize' in queue 'default': 1 job wait" in (
        proc.stdout
    )
    assert '"queue_worked": false' in as_json.stdout and '"kind": "resize"' in as_json.stdout


async def _claimed_nothing(conn: Conn) -> bool:
    cur = await conn.execute(
        "SELECT count(*) FROM taskboard_workers WHERE id = 'only-default'"
        " AND heartbeat_at IS NOT NULL"
    )
    row = await cur.fetchone()
    return bool(row and row[0] == 1)


async def test_pausing_a_queue_that_never_held_a_job_warns_and_still_pauses(
    db_url: str, conn: Conn
) -> None:
    await conn.execute("INSERT INTO taskboard_jobs (kind, queue) VALUES ('noop', 'mail')")
    typo = await asyncio.to_thread(run_cli, db_url, "queue", "pause", "nosuchqueue")
    assert typo.returncode == 0, typo.stderr
    assert "warning: queue 'nosuchqueue' has never held a job" in typo.stderr
    known = await asyncio.to_thread(run_cli, db_url, "queue", "pause", "mail")
    assert known.returncode == 0 and known.stderr.strip() == "", known.stderr
    listed = await asyncio.to_thread(run_cli, db_url, "queue", "list")
    assert "nosuchqueue" in listed.stdout and "mail" in listed.stdout


async def test_the_dashboard_says_what_no_worker_runs_at_80x24() -> None:
    board = FixedBoard(
        dataclasses.replace(
            main_board(),
            orphans=(
                OrphanKind("pdf", "reports", 12, queue_worked=False),
                OrphanKind("resize", "default", 1),
            ),
        )
    )
    async with running(board, size=(80, 24)) as run:
        await settle(run.pilot)
        line = run.app.query_one(NoWorkerLine)
        assert line.display
        assert line.lines[0] == "no live worker works queue 'reports': 12 jobs wait (pdf)"
        shown = "".join(s.text for s in line.render_lines(line.region.reset_offset))
        assert "no live worker works queue 'reports'" in shown, shown
        assert "and 1 more" in shown, shown
        board.snapshot = main_board()
        run.app.request_refresh()
        await settle(run.pilot)
        assert not line.display
