"""A kind's fleet limit and what waits on it, in `status` (text and JSON), the board the
dashboard draws, and the metrics (`taskboard_kind_limited_jobs`)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import psycopg
from taskboard.core.engine import leases, limits
from taskboard.core.kinds import JobKind, KindRegistry
from taskboard.core.runtime.metrics_jobs import JobsCollector
from taskboard.core.view.status import read_board


def _limited_board(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO taskboard_kind_limits (kind, max_running, rate_per_second)"
                     " VALUES ('email', NULL, 14), ('billing', 2, NULL)")
        conn.execute("INSERT INTO taskboard_jobs (kind, payload)"
                     " SELECT 'email', '{}' FROM generate_series(1, 312)")
        conn.execute("INSERT INTO taskboard_jobs (kind, payload, run_at)"  # not due: not waiting
                     " VALUES ('email', '{}', now() + interval '1 hour')")
        conn.execute("INSERT INTO taskboard_jobs (kind, payload, lease_token, lease_expires_at,"
                     " claimed_by, claimed_at, attempts, claim_count)"
                     " VALUES ('billing', '{}', gen_random_uuid(), now() + interval '1 min',"
                     " 'w', now(), 1, 1)")


async def test_the_board_says_what_waits_on_each_limit(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    _limited_board(db_url)
    board = await read_board(conn, database="db", mode="attached")
    assert [lim.summary for lim in board.limits] == [
        "billing: at most 2 running (1 now), 0 waiting on the limit",
        "email: 14/s, 312 waiting on the limit",
    ]


def test_status_prints_each_limit_in_text_and_json(db_url: str) -> None:
    _limited_board(db_url)
    env = {"TASKBOARD_DATABASE_URL": db_url, "PATH": ""}
    cli = [sys.executable, "-m", "taskboard.core.cli", "status"]
    text = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    assert "kind limits (2):\n  billing: at most 2 running (1 now)" in text.stdout
    assert "  email: 14/s, 312 waiting on the limit" in text.stdout
    shown = subprocess.run([*cli, "--json"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert json.loads(shown.stdout)["kind_limits"][1] == {
        "kind": "email", "max_running": None, "rate_per_second": 14.0, "running": 0,
        "waiting": 312}


def test_the_metrics_count_the_jobs_waiting_on_a_limit(db_url: str) -> None:
    _limited_board(db_url)
    families = {f.name: f for f in JobsCollector(db_url, 5.0).collect()}
    samples = {s.labels["kind"]: s.value for s in families["taskboard_kind_limited_jobs"].samples}
    assert samples == {"billing": 0, "email": 312}


async def test_a_limit_removed_from_the_code_is_cleared_and_its_kind_claimed_as_any(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    def registry(**policy: Any) -> KindRegistry:
        made = KindRegistry(builtins=False)
        made.register(JobKind("email", lambda p: dict(p), _nothing, **policy))
        return made

    await conn.set_autocommit(True)
    await limits.declare(conn, registry(rate_per_second=14))
    await conn.execute("INSERT INTO taskboard_jobs (kind, payload) VALUES ('email', '{}')")
    claim = {"worker_id": "w", "limit": 5, "lease_seconds": 30, "queues": ["default"],
             "kinds": ["email"]}
    assert await leases.claim(conn, **claim) == []  # limited: not the ordinary claim's
    board = await read_board(conn, database="db", mode="attached")
    assert [lim.summary for lim in board.limits] == ["email: 14/s, 1 waiting on the limit"]
    await limits.declare(conn, registry())  # the limit is gone from the code
    board = await read_board(conn, database="db", mode="attached")
    assert board.limits == ()
    assert [job.kind for job in await leases.claim(conn, **claim)] == ["email"]


async def _nothing(ctx: Any) -> None:
    return None
