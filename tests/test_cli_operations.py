"""Issue 11's operator tools through `taskboard` as scripts use it: real subprocesses on a
real PostgreSQL, checking exit codes, output lines and what the database holds after."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from croniter import croniter

from tests.test_cli import CLI, assert_one_line_error, job_count, run_cli

PRUNE_LOCK_KEY = 8816834908828729346


def ok(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """The stdout lines of a command that must have succeeded."""
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    return proc.stdout.strip().splitlines()


def one(url: str, query: str, *params: Any) -> Any:
    with psycopg.connect(url, autocommit=True) as c:
        return c.execute(query, params).fetchone()


def execute(url: str, query: str, *params: Any) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(query, params)


def poll(predicate: Any, timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def start_worker(url: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TASKBOARD_DATABASE_URL": url}
    with log.open("w") as out:
        return subprocess.Popen(
            [*CLI, "worker", "--pool-size", "4", *args],
            env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
        )


def registered(url: str, worker_id: str) -> None:
    """Wait until the worker process runs (its row says so)."""
    poll(lambda: one(url, "SELECT count(*) FROM taskboard_workers WHERE id = %s"
                          " AND state = 'running'", worker_id)[0], what=f"{worker_id} running")


def stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]


# --- enqueue with a unique key and a timeout ---------------------------------------------


def test_enqueue_with_a_key_prints_the_id_and_then_already_enqueued_as_that_job(
    db_url: str,
) -> None:
    first = ok(run_cli(db_url, "enqueue", "noop", "--key", "invoice-42", "--timeout", "30"))
    [job_id] = [int(line) for line in first]
    again = run_cli(db_url, "enqueue", "noop", "--key", "invoice-42")
    assert ok(again) == [str(job_id)]  # scripts still get the id on stdout
    assert again.stderr.strip() == f"already enqueued as #{job_id}"
    assert job_count(db_url) == 1
    assert one(db_url, "SELECT unique_key, timeout_seconds FROM taskboard_jobs WHERE id = %s",
               job_id) == ("invoice-42", 30.0)
    # Another key, or another kind with the same key, is another job.
    other = int(ok(run_cli(db_url, "enqueue", "noop", "--key", "invoice-43"))[0])
    assert other != job_id and job_count(db_url) == 2


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--timeout", "0"], "timeout: must be between 0 and 86400"),
        (["--timeout", "1e9"], "timeout: must be between 0 and 86400"),
        (["--timeout", "soon"], "not a number"),
        (["--key", ""], "key: must be 1-300 characters"),
        (["--key", "x" * 301], "key: must be 1-300 characters"),
    ],
)
def test_enqueue_refuses_a_bad_key_or_timeout_in_one_line(
    db_url: str, args: list[str], needle: str
) -> None:
    assert_one_line_error(run_cli(db_url, "enqueue", "noop", *args), needle)
    assert job_count(db_url) == 0


# --- prune -------------------------------------------------------------------------------


def _finished_jobs(url: str) -> dict[str, int]:
    """Jobs in every finished state and age, plus one unfinished and one charged."""
    ids: dict[str, int] = {}
    with psycopg.connect(url, autocommit=True) as c:
        for name, column, age in [
            ("done_2d", "completed_at", "2 days"), ("done_2h", "completed_at", "2 hours"),
            ("dead_8d", "failed_at", "8 days"), ("dead_3d", "failed_at", "3 days"),
            ("cancelled_8d", "cancelled_at", "8 days"), ("cancelled_1h", "cancelled_at", "1 hour"),
            ("pending", None, None),
        ]:
            row = c.execute("INSERT INTO taskboard_jobs (kind) VALUES ('noop') RETURNING id")
            ids[name] = row.fetchone()[0]  # type: ignore[index]
            if column is not None:
                extra = ", last_error = 'x'" if column == "failed_at" else ""
                c.execute(f"UPDATE taskboard_jobs SET {column} = now() - %s::interval{extra}"
                          " WHERE id = %s", (age, ids[name]))
        c.execute(
            "INSERT INTO taskboard_billing_charges (job_id, payment_intent_id, amount, currency,"
            " customer) VALUES (%s, 'pi_kept', 1999, 'usd', 'cus_maya')", (ids["done_2d"],),
        )
        c.execute(
            "INSERT INTO taskboard_workers (id, host, pid, lease_seconds, capacity, stopped_at,"
            " heartbeat_at) VALUES ('long-gone', 'h', 1, 60, 8, now() - interval '2 days',"
            " now() - interval '2 days')"
        )
    return ids


def _job_ids(url: str) -> set[int]:
    with psycopg.connect(url) as c:
        return {r[0] for r in c.execute("SELECT id FROM taskboard_jobs").fetchall()}


def test_prune_deletes_only_what_is_past_its_age_and_keeps_billing_records(db_url: str) -> None:
    ids = _finished_jobs(db_url)
    # Defaults: completed after a day, dead and cancelled after a week.
    assert ok(run_cli(db_url, "prune")) == ["pruned 3 finished jobs and 1 workers"]
    assert _job_ids(db_url) == {ids[n] for n in ("done_2h", "dead_3d", "cancelled_1h", "pending")}
    assert one(db_url, "SELECT job_id, payment_intent_id FROM taskboard_billing_charges") == (
        ids["done_2d"], "pi_kept",
    )
    # One age for every finished state; the unfinished job always stays.
    assert ok(run_cli(db_url, "prune", "--older-than", "90m")) == [
        "pruned 2 finished jobs and 0 workers"
    ]
    assert _job_ids(db_url) == {ids["cancelled_1h"], ids["pending"]}
    assert ok(run_cli(db_url, "prune", "--older-than", "30m")) == [
        "pruned 1 finished jobs and 0 workers"
    ]
    assert _job_ids(db_url) == {ids["pending"]}
    # The counts status shows went down with the rows (kept by the trigger, not scanned).
    status = json.loads("\n".join(ok(run_cli(db_url, "status", "--json"))))
    assert {k: status["counts"][k] for k in ("completed", "dead", "cancelled")} == {
        "completed": 0, "dead": 0, "cancelled": 0,
    }
    assert one(db_url, "SELECT count(*) FROM taskboard_billing_charges") == (1,)


def test_a_long_prune_reports_progress_per_batch_on_stderr(db_url: str) -> None:
    execute(db_url, "INSERT INTO taskboard_jobs (kind, completed_at)"
                    " SELECT 'noop', now() - interval '2 days' FROM generate_series(1, 7)")
    proc = run_cli(db_url, "prune", "--batch", "2")
    assert ok(proc) == ["pruned 7 finished jobs and 0 workers"]
    progress = proc.stderr.strip().splitlines()
    assert progress and progress[0] == "pruned 2 finished jobs so far (1 batches)...", proc.stderr
    assert job_count(db_url) == 0


def test_prune_while_another_process_holds_the_lock_says_so_and_exits_0(db_url: str) -> None:
    _finished_jobs(db_url)
    before = _job_ids(db_url)
    with psycopg.connect(db_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (PRUNE_LOCK_KEY,))
        lines = ok(run_cli(db_url, "prune"))
    assert lines == [
        "another process is pruning right now (it holds the prune lock); nothing done"
    ]
    assert _job_ids(db_url) == before


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--older-than", "3x"], "not a duration: '3x'"),
        (["--older-than=-1d"], "not a duration"),
        (["--older-than", "4000d"], "longer than 10 years"),
        (["--batch", "0"], "--batch must be between 1 and 100000"),
    ],
)
def test_prune_refuses_bad_flags_in_one_line(db_url: str, args: list[str], needle: str) -> None:
    _finished_jobs(db_url)
    before = _job_ids(db_url)
    assert_one_line_error(run_cli(db_url, "prune", *args), needle)
    assert _job_ids(db_url) == before


# --- schedules ---------------------------------------------------------------------------


def test_schedule_add_list_remove(db_url: str) -> None:
    [line] = ok(run_cli(db_url, "schedule", "add", "digest", "--cron", "*/5 * * * *", "email",
                        "--payload", '{"to": "maya@example.com", "subject": "Digest",'
                        ' "text": "hi"}', "--queue", "mail", "--priority", "3",
                        "--max-attempts", "2", "--timeout", "20"))
    assert line.startswith("schedule digest added: email every '*/5 * * * *' (UTC), next run ")
    [line] = ok(run_cli(db_url, "schedule", "add", "nightly", "--cron", "0 3 * * *", "noop"))
    assert line.startswith("schedule nightly added")
    [line] = ok(run_cli(db_url, "schedule", "add", "nightly", "--cron", "30 3 * * *", "noop"))
    assert line.startswith("schedule nightly updated: noop every '30 3 * * *'")
    row = one(db_url, "SELECT cron, kind, queue, priority, max_attempts, timeout_seconds,"
                      " payload->'to'->>0 FROM taskboard_schedules WHERE name = 'digest'")
    assert row == ("*/5 * * * *", "email", "mail", 3, 2, 20.0, "maya@example.com")

    [db_now] = one(db_url, "SELECT now()")
    listed = json.loads(run_cli(db_url, "schedule", "list", "--json").stdout)
    assert [s["name"] for s in listed] == ["digest", "nightly"]
    digest = listed[0]
    assert (digest["cron"], digest["kind"], digest["queue"], digest["last_slot"]) == (
        "*/5 * * * *", "email", "mail", None,
    )
    next_run = datetime.fromisoformat(digest["next_run"])
    expected = croniter("*/5 * * * *", db_now).get_next(datetime)
    assert abs((next_run - expected).total_seconds()) in (0, 300)  # a slot may pass between
    assert db_now < next_run <= db_now + timedelta(minutes=5, seconds=5)

    text = ok(run_cli(db_url, "schedule", "list"))
    assert len(text) == 2 and text[0].startswith("digest") and "'*/5 * * * *'" in text[0]
    assert "last slot never" in text[0] and "next run 20" in text[0]
    status = ok(run_cli(db_url, "status"))
    at = status.index("schedules (2):")
    assert status[at + 1].strip().startswith("digest") and "next run" in status[at + 1]
    status_json = json.loads(run_cli(db_url, "status", "--json").stdout)
    assert [s["name"] for s in status_json["schedules"]] == ["digest", "nightly"]
    shown = datetime.fromisoformat(status_json["schedules"][0]["next_run"])
    assert (shown - next_run).total_seconds() in (0, 300)

    assert ok(run_cli(db_url, "schedule", "remove", "digest")) == ["schedule digest removed"]
    assert_one_line_error(run_cli(db_url, "schedule", "remove", "digest"),
                          "taskboard schedule remove: error: no schedule named 'digest'", code=3)
    assert one(db_url, "SELECT array_agg(name) FROM taskboard_schedules") == (["nightly"],)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["bad", "--cron", "every minute", "noop"],
         "taskboard schedule add: error: cron: 'every minute' is not a cron expression"),
        (["bad", "--cron", "61 * * * *", "noop"], "is not a cron expression"),
        (["b d", "--cron", "* * * * *", "noop"], "name: must be 1-100 letters"),
        (["bad", "--cron", "* * * * *", "nosuchkind"], "nosuchkind"),
        (["bad", "--cron", "* * * * *", "sleep", "--payload", '{"seconds": "x"}'], "seconds"),
        (["bad", "--cron", "* * * * *", "noop", "--payload", "[1]"], "payload"),
        (["bad", "--cron", "* * * * *", "noop", "--timeout", "0"], "timeout"),
        (["bad", "noop"], "the following arguments are required: --cron"),
    ],
)
def test_a_bad_schedule_is_one_line_exit_2_and_writes_nothing(
    db_url: str, args: list[str], needle: str
) -> None:
    assert_one_line_error(run_cli(db_url, "schedule", "add", *args), needle)
    assert one(db_url, "SELECT count(*) FROM taskboard_schedules") == (0,)


def test_a_schedule_added_from_the_command_line_runs_in_a_worker(
    db_url: str, tmp_path: Path
) -> None:
    ok(run_cli(db_url, "schedule", "add", "tick", "--cron", "* * * * * *", "noop"))
    # Six fields: every second (croniter's seconds field), so a slot comes at once.
    log = tmp_path / "worker.log"
    worker = start_worker(db_url, log, "--id", "sched", "--poll", "0.2")
    try:
        poll(lambda: one(db_url, "SELECT count(*) FROM taskboard_jobs"
                                 " WHERE completed_at IS NOT NULL")[0] >= 1,
             what="a scheduled job completed")
    finally:
        stop(worker, log)
    listed = json.loads(run_cli(db_url, "schedule", "list", "--json").stdout)
    assert listed[0]["last_slot"] is not None


# --- queues ------------------------------------------------------------------------------


def test_queue_pause_list_resume(db_url: str) -> None:
    for queue in ("mail", "mail", "default"):
        ok(run_cli(db_url, "enqueue", "noop", "--queue", queue))
    assert ok(run_cli(db_url, "queue", "pause", "mail", "--reason", "SMTP provider down")) == [
        "queue mail paused: no worker claims from it until `taskboard queue resume mail`"
    ]
    rows = json.loads(run_cli(db_url, "queue", "list", "--json").stdout)
    assert [(r["name"], r["paused"], r["reason"], r["pending"]) for r in rows] == [
        ("default", False, None, 1), ("mail", True, "SMTP provider down", 2),
    ]
    text = ok(run_cli(db_url, "queue", "list"))
    assert text[0].split()[:2] == ["default", "active"]
    assert text[1].split()[:2] == ["mail", "paused"] and "(SMTP provider down)" in text[1]
    status = ok(run_cli(db_url, "status"))
    at = status.index("paused queues (1):")
    assert status[at + 1].split()[0] == "mail" and "(SMTP provider down)  2 waiting" in (
        status[at + 1]
    )
    [paused] = json.loads(run_cli(db_url, "status", "--json").stdout)["paused_queues"]
    assert (paused["name"], paused["reason"], paused["waiting"]) == (
        "mail", "SMTP provider down", 2,
    )

    assert ok(run_cli(db_url, "queue", "resume", "mail")) == ["queue mail resumed"]
    assert_one_line_error(run_cli(db_url, "queue", "resume", "mail"),
                          "taskboard queue resume: error: queue 'mail' is not paused", code=3)
    rows = json.loads(run_cli(db_url, "queue", "list", "--json").stdout)
    assert [(r["name"], r["paused"]) for r in rows] == [("default", False), ("mail", False)]
    assert "paused queues (0):" in ok(run_cli(db_url, "status"))


def test_a_paused_queue_is_not_worked_until_resumed_from_the_command_line(
    db_url: str, tmp_path: Path
) -> None:
    ok(run_cli(db_url, "queue", "pause", "default"))
    job_id = int(ok(run_cli(db_url, "enqueue", "noop"))[0])
    log = tmp_path / "worker.log"
    worker = start_worker(db_url, log, "--id", "q", "--poll", "0.2")
    try:
        registered(db_url, "q")
        time.sleep(1.0)
        assert one(db_url, "SELECT attempts, completed_at FROM taskboard_jobs WHERE id = %s",
                   job_id) == (0, None)
        ok(run_cli(db_url, "queue", "resume", "default"))
        poll(lambda: one(db_url, "SELECT completed_at FROM taskboard_jobs WHERE id = %s",
                         job_id)[0], what="completed after resume")
    finally:
        stop(worker, log)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["pause", "bad\nname"], "line break or control character"),
        (["pause", "mail", "--reason", "two\nlines"], "reason holds a line break"),
        (["pause", "mail", "--reason", "x" * 501], "reason is longer than 500"),
        (["pause"], "the following arguments are required: queue"),
        (["stop", "mail"], "invalid choice"),
    ],
)
def test_bad_queue_commands_are_one_line_exit_2(
    db_url: str, args: list[str], needle: str
) -> None:
    assert_one_line_error(run_cli(db_url, "queue", *args), needle)
    assert one(db_url, "SELECT count(*) FROM taskboard_queues") == (0,)


# --- cancel, burst, the worker's retention flags -----------------------------------------


def test_cancel_reaches_the_worker_running_the_job(db_url: str, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    worker = start_worker(db_url, log, "--id", "holder", "--lease", "30")
    try:
        job_id = int(ok(run_cli(db_url, "enqueue", "sleep", "--payload", '{"seconds": 60}'))[0])
        poll(lambda: one(db_url, "SELECT lease_token FROM taskboard_jobs WHERE id = %s",
                         job_id)[0], what="claimed")
        assert ok(run_cli(db_url, "cancel", str(job_id))) == [f"job {job_id} cancelled"]
        stopped = time.monotonic()
        poll(lambda: one(db_url, "SELECT outcome FROM taskboard_attempts WHERE job_id = %s",
                         job_id)[0] == "cancelled", timeout=5, what="the handler stopped")
        assert time.monotonic() - stopped < 3.0  # told by NOTIFY, not by a lease expiring
        assert_one_line_error(run_cli(db_url, "cancel", str(job_id)), "is already finished",
                              code=3)
    finally:
        stop(worker, log)
    assert '"event": "cancelled"' in log.read_text()


def test_worker_burst_completes_everything_ready_and_exits_0(db_url: str, tmp_path: Path) -> None:
    execute(db_url, "INSERT INTO taskboard_jobs (kind) SELECT 'noop' FROM generate_series(1, 40)")
    later = int(ok(run_cli(db_url, "enqueue", "noop", "--run-at",
                           (datetime.now(UTC) + timedelta(hours=1)).isoformat()))[0])
    env = {**os.environ, "TASKBOARD_DATABASE_URL": db_url}
    proc = subprocess.run(
        [*CLI, "worker", "--burst", "--id", "burst", "--pool-size", "4", "--lease", "5"],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert one(db_url, "SELECT count(*) FILTER (WHERE completed_at IS NOT NULL),"
                       " count(*) FILTER (WHERE completed_at IS NULL) FROM taskboard_jobs") == (
        40, 1,
    )
    # Nothing ready is left; the job due in an hour is not "ready" and did not hold it up.
    assert one(db_url, "SELECT completed_at, attempts FROM taskboard_jobs WHERE id = %s",
               later) == (None, 0)
    assert one(db_url, "SELECT stopped_at IS NOT NULL FROM taskboard_workers"
                       " WHERE id = 'burst'") == (True,)


def test_worker_prunes_by_its_keep_flags(db_url: str, tmp_path: Path) -> None:
    ids = _finished_jobs(db_url)
    log = tmp_path / "worker.log"
    worker = start_worker(db_url, log, "--id", "janitor", "--keep-completed", "1h",
                          "--keep-dead", "2d", "--keep-cancelled", "30m", "--prune-every", "0.2")
    try:
        poll(lambda: _job_ids(db_url) == {ids["pending"]}, what="pruned by the worker")
        # The rows are gone once the batch commits, a moment before the worker hears so.
        poll(lambda: '"msg": "finished jobs pruned"' in log.read_text(), what="the prune said")
    finally:
        stop(worker, log)
    assert one(db_url, "SELECT count(*) FROM taskboard_billing_charges") == (1,)


def test_worker_with_pruning_off_keeps_everything(db_url: str, tmp_path: Path) -> None:
    ids = _finished_jobs(db_url)
    log = tmp_path / "worker.log"
    worker = start_worker(db_url, log, "--id", "keeper", "--keep-completed", "0s",
                          "--prune-every", "0")
    try:
        registered(db_url, "keeper")
        time.sleep(1.0)
    finally:
        stop(worker, log)
    assert _job_ids(db_url) == set(ids.values())


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--keep-completed", "soon"], "not a duration: 'soon'"),
        (["--keep-dead", "4000d"], "longer than 10 years"),
        (["--prune-every", "-1"], "prune interval must be between 0 and 86400"),
        (["--prune-every", "nan"], "must be a finite number"),
        (["--metrics-port", "70000"], "ports are 0 to 65535"),
        (["--metrics-port", "http"], "not an integer"),
    ],
)
def test_worker_refuses_bad_operation_flags_in_one_line(
    db_url: str, args: list[str], needle: str
) -> None:
    assert_one_line_error(run_cli(db_url, "worker", *args), needle)
    assert one(db_url, "SELECT count(*) FROM taskboard_workers") == (0,)
