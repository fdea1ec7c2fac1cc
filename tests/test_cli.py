"""`taskboard` as scripts use it: exit codes, one-line errors, nothing written on bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from taskboard.core.engine.schema import SCHEMA_VERSION

CLI = [sys.executable, "-m", "taskboard.core.cli"]


def run_cli(
    url: str | None, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    full_env = {
        k: v for k, v in os.environ.items() if k not in ("TASKBOARD_DATABASE_URL", "DATABASE_URL")
    }
    if url is not None:
        full_env["TASKBOARD_DATABASE_URL"] = url
    full_env.update(env or {})
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def job_count(url: str) -> int:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT count(*) FROM taskboard_jobs").fetchone()
        assert row is not None
        return int(row[0])


def assert_one_line_error(
    proc: subprocess.CompletedProcess[str], *needles: str, code: int = 2
) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_enqueue_status_history_retry_cancel(db_url: str) -> None:
    proc = run_cli(
        db_url,
        "enqueue",
        "sleep",
        "--payload",
        '{"seconds": 1}',
        "--priority",
        "5",
        "--queue",
        "q1",
        "--max-attempts",
        "2",
        "--run-at",
        "2030-01-01T00:00:00Z",
    )
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout.strip())
    with psycopg.connect(db_url) as c:
        row = c.execute(
            "SELECT kind, payload, queue, priority, max_attempts, run_at::text"
            " FROM taskboard_jobs WHERE id = %s",
            (job_id,),
        ).fetchone()
    assert row is not None
    assert row[:5] == ("sleep", {"seconds": 1.0}, "q1", 5, 2) and row[5].startswith("2030-01-01")

    status = run_cli(db_url, "status", "--json")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["counts"]["scheduled"] == 1 and data["counts"]["pending"] == 0

    assert run_cli(db_url, "cancel", str(job_id)).returncode == 0
    assert_one_line_error(run_cli(db_url, "cancel", str(job_id)), "already finished", code=3)
    assert run_cli(db_url, "retry", str(job_id)).returncode == 0
    assert_one_line_error(run_cli(db_url, "retry", "999999"), "does not exist", code=3)
    assert "claims (0):" in run_cli(db_url, "history", str(job_id)).stdout
    text = run_cli(db_url, "status")
    assert text.returncode == 0 and "pending 1" in text.stdout


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["enqueue", "nope"], ["unknown job kind 'nope'"]),
        (["enqueue", "sleep", "--payload", "{not json"], ["payload", "not valid JSON"]),
        (["enqueue", "sleep", "--payload", '{"seconds": -1}'], ["seconds"]),
        (["enqueue", "sleep", "--payload", "[1]"], ["payload", "JSON object"]),
        (["enqueue", "noop", "--max-attempts", "0"], ["max_attempts"]),
        (["enqueue", "noop", "--priority", "high"], ["not an integer"]),
        (["enqueue", "noop", "--run-at", "tomorrow"], ["ISO 8601"]),
        (["worker", "--lease", "0"], ["lease must be between 1 and 86400"]),
        (["worker", "--lease", "-5"], ["lease must be between 1 and 86400"]),
        (["worker", "--lease", "10", "--renew-every", "10"], ["renewal interval"]),
        (["worker", "--pool-size", "2"], ["pool size must be between 3 and 1000"]),
        (["retry", "abc"], ["not an integer"]),
        (["frobnicate"], ["invalid choice"]),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    db_url: str, args: list[str], needles: list[str]
) -> None:
    assert_one_line_error(run_cli(db_url, *args), *needles)
    assert job_count(db_url) == 0


def test_unreachable_database_is_one_line_and_hides_the_password() -> None:
    url = "postgresql://maya:hunter2-secret@127.0.0.1:1/taskboard"
    for args in (["status"], ["enqueue", "noop"], ["migrate"]):
        proc = run_cli(url, *args)
        assert_one_line_error(proc, "cannot connect", "maya:***@127.0.0.1:1")
        assert "hunter2-secret" not in proc.stderr + proc.stdout


def test_a_worker_waits_a_lease_for_an_unreachable_database_then_exits_5() -> None:
    """A worker is a service a supervisor restarts: a database it cannot reach at start (a
    restart, a failover under way) is waited out for a lease, each retry logged, and then
    it exits 5 ("try again later"), not 2 ("fix the command")."""
    url = "postgresql://maya:hunter2-secret@127.0.0.1:1/taskboard"
    started = time.monotonic()
    proc = run_cli(url, "worker", "--lease", "2")
    took = time.monotonic() - started
    assert proc.returncode == 5, (proc.returncode, proc.stderr)
    assert "hunter2-secret" not in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    *retries, last = proc.stderr.strip().splitlines()
    assert last.startswith("taskboard worker: error: cannot connect"), last
    assert "maya:***@127.0.0.1:1" in last and "waited 2s" in last, last
    assert len(retries) >= 3, proc.stderr  # 0.2 + 0.4 + 0.8 s, then 1.6 s would pass 2 s
    for line in retries:
        record = json.loads(line)
        assert record["level"] == "warning" and "cannot connect" in record["error"], record
    assert took >= 1.4, took


def test_a_worker_refused_for_good_by_the_server_says_so_at_once_with_2(db_url: str) -> None:
    """No such database: waiting does not end that, so no lease-long wait and no 5."""
    url = db_url.replace("/tb_", "/no_such_db_tb_", 1)
    assert url != db_url
    started = time.monotonic()
    proc = run_cli(url, "worker", "--lease", "30")
    assert time.monotonic() - started < 20
    assert_one_line_error(proc, "cannot connect", "does not exist")


def test_schema_from_a_newer_version_is_refused(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("INSERT INTO taskboard_schema (version) VALUES (99)")
    for args in (["migrate"], ["enqueue", "noop"], ["worker"]):
        assert_one_line_error(run_cli(db_url, *args), "schema is version 99", "newer")
    assert job_count(db_url) == 0


def test_help_on_every_command() -> None:
    for cmd in ("migrate", "enqueue", "worker", "status", "retry", "cancel", "history"):
        proc = run_cli(None, cmd, "--help")
        assert proc.returncode == 0 and "usage: taskboard " + cmd in proc.stdout


def test_migrate_is_safe_when_many_processes_start_at_once(make_db: Any) -> None:
    url = make_db()
    with psycopg.connect(url, autocommit=True) as c:  # start from an empty database
        c.execute("DROP SCHEMA public CASCADE")  # tables, functions, triggers: all of it
        c.execute("CREATE SCHEMA public")
    procs = [
        subprocess.Popen(
            [*CLI, "migrate"],
            env={**os.environ, "TASKBOARD_DATABASE_URL": url},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(5)
    ]
    results = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 5, results
    with psycopg.connect(url) as c:
        versions = c.execute("SELECT array_agg(version ORDER BY version) FROM taskboard_schema")
        assert versions.fetchone() == (list(range(1, SCHEMA_VERSION + 1)),)


def _poll(db_url: str, query: str, *, timeout: float, step: float) -> object:
    """Until `query` answers something true (returned), or `timeout` seconds (None)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with psycopg.connect(db_url) as c:
            row = c.execute(query).fetchone()
        if row is not None and row[0]:
            return row[0]
        time.sleep(step)
    return None


def _claims_by_worker(db_url: str) -> dict[str, int]:
    with psycopg.connect(db_url) as c:
        rows = c.execute("SELECT worker_id, count(*) FROM taskboard_attempts GROUP BY 1").fetchall()
    return {worker: count for worker, count in rows}


def test_three_worker_processes_complete_2000_jobs_exactly_once(
    db_url: str, tmp_path: Path
) -> None:
    env = {**os.environ, "TASKBOARD_DATABASE_URL": db_url}
    workers = []
    for i in range(3):
        log = (tmp_path / f"w{i}.log").open("w")
        workers.append(
            subprocess.Popen(
                [
                    *CLI,
                    "worker",
                    "--id",
                    f"proc-{i}",
                    "--lease",
                    "1",
                    "--pool-size",
                    "6",
                    "--poll",
                    "0.5",
                    # Not the default (100 or 200 by the host's cores): at 200 the first
                    # worker to look claimed all 2,000 in ~0.2 s, and one that looked later
                    # found nothing. At 20 the sleep jobs alone keep all three busy ~2 s
                    # (200 x 0.5 s / 60 slots), far longer than they take to wake.
                    "--concurrency",
                    "20",
                ],
                env=env,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )
        )
    try:
        # The jobs come once all three have registered: on a busy host one process may
        # start seconds after the others, and would find the work done (CI saw it).
        _poll(db_url, "SELECT count(*) = 3 FROM taskboard_workers WHERE state = 'running'",
              timeout=60, step=0.05)
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute(
                "INSERT INTO taskboard_jobs (kind, payload)"
                " SELECT CASE WHEN g % 10 = 0 THEN 'sleep' ELSE 'noop' END,"
                "        CASE WHEN g % 10 = 0 THEN '{\"seconds\": 0.5}'::jsonb ELSE '{}' END"
                "   FROM generate_series(1, 2000) g"
            )
            # As `taskboard enqueue` does: a bare INSERT wakes no one, and each worker found
            # the jobs at its own next --poll tick, up to 0.5 s apart.
            c.execute("SELECT pg_notify('taskboard_jobs', 'default')")
        # Stall one worker past its lease while it runs a sleep job (no-op jobs finish in
        # well under a millisecond: one caught "held" may already be completing), so the
        # job is reclaimed and its late completion meets the fence.
        # ... or the work is all done: then proc-0 never will (say so now, not in 60 s).
        seen = _poll(db_url, "SELECT CASE WHEN EXISTS (SELECT 1 FROM taskboard_jobs"
                     " WHERE claimed_by = 'proc-0' AND kind = 'sleep' AND lease_token IS NOT NULL)"
                     " THEN 'held' WHEN NOT EXISTS (SELECT 1 FROM taskboard_jobs"
                     " WHERE completed_at IS NULL) THEN 'all done' END",
                     timeout=60, step=0.01)
        assert seen == "held", (seen, _claims_by_worker(db_url))
        workers[0].send_signal(signal.SIGSTOP)
        time.sleep(2.0)
        workers[0].send_signal(signal.SIGCONT)
        _poll(db_url, "SELECT NOT EXISTS (SELECT 1 FROM taskboard_jobs"
              " WHERE completed_at IS NULL)", timeout=120, step=0.2)
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        codes = [w.wait(timeout=30) for w in workers]
    assert codes == [0, 0, 0], [(tmp_path / f"w{i}.log").read_text()[-2000:] for i in range(3)]
    with psycopg.connect(db_url) as c:
        counts = c.execute(
            "SELECT count(*) FILTER (WHERE completed_at IS NOT NULL),"
            "       count(*) FILTER (WHERE failed_at IS NOT NULL) FROM taskboard_jobs"
        ).fetchone()
        per_job = c.execute(
            "SELECT job_id, count(*) FILTER (WHERE outcome = 'completed'),"
            "       max(attempt) FILTER (WHERE outcome = 'completed'), max(attempt)"
            "  FROM taskboard_attempts GROUP BY job_id"
        ).fetchall()
        by_worker = dict(
            c.execute("SELECT worker_id, count(*) FROM taskboard_attempts GROUP BY 1").fetchall()
        )
        stale = c.execute(
            "SELECT count(*) FROM taskboard_attempts WHERE worker_id = 'proc-0'"
            " AND outcome IN ('lease_lost', 'completion_rejected')"
        ).fetchone()
    assert counts == (2000, 0)
    assert len(per_job) == 2000
    # exactly once, and always by the latest attempt: no stale token ever completed a job
    assert all(done == 1 and done_attempt == last for _, done, done_attempt, last in per_job)
    assert set(by_worker) == {"proc-0", "proc-1", "proc-2"}, by_worker
    assert stale is not None and stale[0] > 0  # the stall really cost proc-0 its leases
    logs = "".join((tmp_path / f"w{i}.log").read_text() for i in range(3))
    assert "Traceback" not in logs
    for line in logs.splitlines():
        json.loads(line)  # structured logs: every line is a JSON object


def test_sigterm_while_the_worker_starts_exits_0_and_claims_nothing(
    db_url: str, tmp_path: Path
) -> None:
    # A supervisor may stop a worker at any moment, also while it starts. Holding the
    # stand-ins' registry lock keeps the worker in its start-up long enough to be sure the
    # signal lands there (it used to die of it: exit -15, seen in CI).
    from taskboard.core.sql.admin import STANDINS_LOCK

    env = {**os.environ, "TASKBOARD_DATABASE_URL": db_url}
    log_path = tmp_path / "w.log"
    with psycopg.connect(db_url, autocommit=True) as holder:
        holder.execute("INSERT INTO taskboard_jobs (kind, payload) VALUES ('noop', '{}')")
        holder.execute(STANDINS_LOCK)
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                [*CLI, "worker", "--id", "starting", "--lease", "2"],
                env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            )
        try:
            deadline = time.monotonic() + 30
            waiting = None
            while time.monotonic() < deadline:
                waiting = holder.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE wait_event = 'advisory'"
                ).fetchone()
                if waiting:
                    break
                time.sleep(0.02)
            assert waiting, "the worker never waited for the stand-ins' lock"
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)  # the signal is handled while the worker still waits
        finally:
            holder.execute("SELECT pg_advisory_unlock_all()")
        code = proc.wait(timeout=30)
        row = holder.execute(
            "SELECT attempts, lease_token IS NULL FROM taskboard_jobs"
        ).fetchone()
    assert code == 0, log_path.read_text()[-2000:]
    assert row == (0, True)  # it claimed nothing
    assert "Traceback" not in log_path.read_text()


def test_the_worker_runs_on_uvloop_unless_told_otherwise_and_logs_which(
    db_url: str, tmp_path: Path
) -> None:
    def loop_of(extra: dict[str, str]) -> str:
        env = {k: v for k, v in os.environ.items() if k != "TASKBOARD_EVENT_LOOP"}
        env.update({"TASKBOARD_DATABASE_URL": db_url, **extra})
        log_path = tmp_path / f"w-{len(extra)}.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen([*CLI, "worker", "--id", f"loop-{len(extra)}"], env=env,
                                    stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                # Whole lines only: the worker may be half-way through writing the last.
                written = log_path.read_text().split("\n")[:-1]
                lines = [json.loads(line) for line in written]
                started = [line for line in lines if "loop" in line]
                if started:
                    assert started[0]["msg"] == "worker starting"  # fields keep the message
                    return str(started[0]["loop"])
                assert proc.poll() is None, log_path.read_text()[-2000:]
                time.sleep(0.05)
            raise AssertionError("the worker never logged its start")
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0, log_path.read_text()[-2000:]

    assert loop_of({}) == "uvloop"
    assert loop_of({"TASKBOARD_EVENT_LOOP": "asyncio"}) == "asyncio"
    proc = run_cli(db_url, "status", env={"TASKBOARD_EVENT_LOOP": "tokio"})
    assert_one_line_error(proc, "TASKBOARD_EVENT_LOOP='tokio'", "uvloop, asyncio")


@pytest.mark.parametrize(("module", "prog"), [("taskboard.core.cli", "taskboard"),
                                              ("taskboard.tui.main", "taskboard-tui")])
def test_version_names_the_installed_release_and_the_schema_it_migrates_to(
    module: str, prog: str
) -> None:
    from importlib import metadata

    proc = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env={k: v for k, v in os.environ.items()
                               if k not in ("DATABASE_URL", "TASKBOARD_DATABASE_URL")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{prog} {metadata.version('taskboard')} (schema {SCHEMA_VERSION})\n"
    assert proc.stderr == ""  # no database was needed, none started
