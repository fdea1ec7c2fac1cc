"""`taskboard history` shows one job in full (every claim, its full error, payload secrets
masked, charges), numbered by claim across retries; `taskboard advise` prints lease advice.
Real worker, real database, the real command line in a subprocess."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from taskboard.core.engine.events import Completed, Dead
from taskboard.core.kinds import JobContext, JobKind, builtin_registry
from taskboard.core.queue.jobs import enqueue, retry

from tests.conftest import wait_for
from tests.harness import Recorder, run_workers
from tests.test_cli import assert_one_line_error, run_cli

LONG_ERROR = (
    "card declined (HTTP 402): your card has insufficient funds; the issuer asked us not to "
    "retry before tomorrow\nsecond line"
)


async def test_history_shows_every_claim_with_its_full_error_across_a_retry(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    registry = builtin_registry()
    runs: list[int] = []

    async def flaky(ctx: JobContext) -> None:
        runs.append(ctx.job_id)
        if len(runs) == 1:
            raise RuntimeError(LONG_ERROR)

    registry.register(JobKind("flaky", lambda p: dict(p), flaky))
    rec = Recorder()
    async with run_workers(db_url, "w-hist", recorder=rec, registry=registry, lease_seconds=5):
        job = await enqueue(
            conn, registry, "flaky", {"to": "maya@example.com", "api_key": "sk_live_123"},
            max_attempts=1,
        )
        await wait_for(lambda: rec.of(Dead), what="the first run to die")
        await retry(conn, job)  # a retry starts the attempt counter again, not the claims
        await wait_for(lambda: rec.of(Completed), what="the retried run to complete")

    text = run_cli(db_url, "history", str(job))
    assert text.returncode == 0, text.stderr
    out = text.stdout
    # The whole error, escaped onto its line: nothing cut at 20 characters.
    assert "error: RuntimeError: " + LONG_ERROR.replace("\n", "\\n") in out
    claims = [line.strip() for line in out.splitlines() if line.startswith("  #")]
    assert [c.split()[0] for c in claims] == ["#1", "#2"], out
    assert "failed" in claims[0] and "completed" in claims[1]
    assert "sk_live_123" not in out and '"api_key": "***"' in out
    assert "claims (2):" in out and f"job #{job}" in out

    as_json = json.loads(run_cli(db_url, "history", str(job), "--json").stdout)
    assert [a["ordinal"] for a in as_json["attempts"]] == [1, 2]
    assert as_json["attempts"][0]["error"] == "RuntimeError: " + LONG_ERROR
    assert as_json["payload"]["api_key"] == "***"


def test_history_of_a_job_never_claimed_and_of_no_job(db_url: str) -> None:
    made = run_cli(db_url, "enqueue", "noop", "--queue", "nobody-works-here")
    job = made.stdout.strip()
    shown = run_cli(db_url, "history", job)
    assert shown.returncode == 0, shown.stderr
    assert "claims (0):" in shown.stdout and "pending" in shown.stdout
    assert_one_line_error(run_cli(db_url, "history", "999999"), "does not exist", code=3)


async def test_advise_prints_a_row_per_kind_that_ran(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    empty = run_cli(db_url, "advise")
    assert empty.returncode == 0 and "no attempts with recorded timings" in empty.stdout
    registry = builtin_registry()
    rec = Recorder()
    async with run_workers(db_url, "w-adv", recorder=rec, registry=registry, lease_seconds=4):
        for _ in range(3):
            await enqueue(conn, registry, "sleep", {"seconds": 0.05})
        await wait_for(lambda: len(rec.of(Completed)) == 3, what="three sleeps")
    shown = run_cli(db_url, "advise")
    assert shown.returncode == 0, shown.stderr
    [row] = [line for line in shown.stdout.splitlines() if line.startswith("sleep ")]
    assert row.split()[1] == "3" and "ok" in row
    data = json.loads(run_cli(db_url, "advise", "--json").stdout)
    assert data[0]["kind"] == "sleep" and 0.04 < data[0]["p50"] < 1.0
