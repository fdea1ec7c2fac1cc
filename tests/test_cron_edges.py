"""Issue 22 items 3 and 4: cron that cannot take the fleet down, read in UTC whatever the
session's zone. Real `taskboard` subprocesses on a real PostgreSQL where the issue quotes
the command line; the daylight-saving rules of `taskboard.core.operations.cron` on fixed dates."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from taskboard.core.operations import cron
from taskboard.core.view.status import read_board

from tests.test_cli import CLI, assert_one_line_error, run_cli
from tests.test_cli_operations import execute, ok, one, poll, stop


def _worker(url: str, log: Path, worker_id: str, **env: str) -> subprocess.Popen[bytes]:
    full = {**os.environ, "TASKBOARD_DATABASE_URL": url, **env}
    with log.open("w") as out:
        return subprocess.Popen(
            [*CLI, "worker", "--pool-size", "4", "--id", worker_id, "--poll", "0.2"],
            env=full, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
        )


def _hand_written(url: str, name: str, cron_expr: str, kind: str = "noop",
                  payload: str = "{}", tz: str | None = None) -> None:
    """A schedule row as an old version, a script or a hand would write it: unchecked."""
    execute(url, "INSERT INTO taskboard_schedules (name, cron, kind, payload, created_at)"
                 " VALUES (%s, %s, %s, %s::jsonb, now() - interval '1 hour')",
            name, cron_expr, kind, payload)
    if tz is not None:
        execute(url, "UPDATE taskboard_schedules SET tz = %s WHERE name = %s", tz, name)


# --- refused at add --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        ("0 0 31 2 *", "cron: '0 0 31 2 *' names no time within 5 years: it would never run"),
        ("0 0 30 2 *", "names no time within 5 years"),
        ("0 3 * * * 0 2031", "is not a cron expression"),  # a year field: refused
        ("0 3 * *", "is not a cron expression"),
    ],
)
def test_an_expression_that_never_runs_is_refused_at_add_in_one_line(
    db_url: str, expr: str, needle: str
) -> None:
    proc = run_cli(db_url, "schedule", "add", "feb31", "--cron", expr, "noop")
    assert_one_line_error(proc, "taskboard schedule add: error: ", needle)
    assert one(db_url, "SELECT count(*) FROM taskboard_schedules") == (0,)
    ok(run_cli(db_url, "schedule", "list"))
    ok(run_cli(db_url, "status"))


@pytest.mark.parametrize("zone", ["Mars/Base", "../../etc/passwd", "a" * 5000])
def test_an_unknown_zone_is_refused_at_add_in_one_line(db_url: str, zone: str) -> None:
    proc = run_cli(db_url, "schedule", "add", "x", "--cron", "0 3 * * *", "--tz", zone, "noop")
    assert_one_line_error(proc, f"tz: {zone[:64]!r}"[:-1], "is not a time zone")
    assert len(proc.stderr) < 300
    assert one(db_url, "SELECT count(*) FROM taskboard_schedules") == (0,)


def test_a_sixth_field_is_seconds_after_the_other_five() -> None:
    at = datetime(2026, 12, 4, 14, 0, tzinfo=UTC)
    assert cron.following("0 3 * * * 30", "UTC", at) == datetime(2026, 12, 5, 3, 0, 30,
                                                                  tzinfo=UTC)
    assert cron.following("* * * * * *", "UTC", at) == at + timedelta(seconds=1)


# --- failing at run time: disabled, shown, never a crash loop ----------------------------


def test_schedules_that_fail_in_a_worker_are_disabled_shown_and_the_worker_runs_on(
    db_url: str, tmp_path: Path
) -> None:
    # Each row no `schedule add` would accept, written by hand: an impossible date, a zone
    # that does not exist, a payload its kind refuses, a year field. At 683562c the first
    # alone made every noop worker exit 4 on every start.
    _hand_written(db_url, "feb31", "0 0 31 2 *")
    _hand_written(db_url, "mars", "* * * * *", tz="Mars/Base")
    _hand_written(db_url, "bad-sleep", "* * * * * *", kind="sleep", payload='{"seconds": "x"}')
    _hand_written(db_url, "year", "0 3 * * * 0 2031")
    ok(run_cli(db_url, "schedule", "add", "tick", "--cron", "* * * * * *", "noop"))
    # The readers first, before any worker disabled anything: none of them crashes.
    listed = ok(run_cli(db_url, "schedule", "list"))
    feb31 = next(line for line in listed if line.startswith("feb31"))
    assert "next run NONE: '0 0 31 2 *' in UTC: CroniterBadDateError" in feb31
    ok(run_cli(db_url, "status"))

    log = tmp_path / "worker.log"
    worker = _worker(db_url, log, "w1")
    try:
        poll(lambda: one(db_url, "SELECT count(*) FROM taskboard_schedules"
                                 " WHERE disabled_at IS NOT NULL")[0] == 4,
             what="the four bad schedules disabled")
        # The good schedule runs on in the same worker.
        poll(lambda: one(db_url, "SELECT count(*) FROM taskboard_jobs WHERE"
                                 " unique_key LIKE 'schedule:tick:%%' AND completed_at IS NOT"
                                 " NULL")[0] >= 2,
             what="the good schedule's jobs completed")
        assert worker.poll() is None, log.read_text()[-3000:]
        assert one(db_url, "SELECT count(*) FROM taskboard_jobs"
                           " WHERE unique_key NOT LIKE 'schedule:tick:%%'") == (0,)

        errors = dict(_rows(db_url, "SELECT name, disabled_error FROM taskboard_schedules"
                                    " WHERE disabled_at IS NOT NULL"))
        assert "'0 0 31 2 *' in UTC: CroniterBadDateError" in errors["feb31"]
        assert "'Mars/Base' is not a time zone" in errors["mars"]
        assert "seconds" in errors["bad-sleep"]
        assert "'0 3 * * * 0 2031'" in errors["year"]

        listed = ok(run_cli(db_url, "schedule", "list"))
        feb31 = next(line for line in listed if line.startswith("feb31"))
        assert "DISABLED since " in feb31 and "CroniterBadDateError" in feb31
        tick = next(line for line in listed if line.startswith("tick"))
        assert "next run 20" in tick and "UTC" in tick
        rows = json.loads(ok_json(run_cli(db_url, "schedule", "list", "--json")))
        by_name = {r["name"]: r for r in rows}
        assert by_name["feb31"]["enabled"] is False and by_name["feb31"]["next_run"] is None
        assert "CroniterBadDateError" in by_name["feb31"]["error"]
        assert by_name["tick"]["enabled"] is True and by_name["tick"]["error"] is None
        status = ok(run_cli(db_url, "status"))
        assert any("feb31" in line and "DISABLED" in line for line in status)
        status_json = json.loads(ok_json(run_cli(db_url, "status", "--json")))
        assert {s["name"] for s in status_json["schedules"] if not s["enabled"]} == {
            "feb31", "mars", "bad-sleep", "year"}

        # Adding it again, right this time, enables it.
        ok(run_cli(db_url, "schedule", "add", "feb31", "--cron", "0 0 28 2 *", "noop"))
        assert one(db_url, "SELECT disabled_at, disabled_error FROM taskboard_schedules"
                           " WHERE name = 'feb31'") == (None, None)
        listed = ok(run_cli(db_url, "schedule", "list"))
        feb31 = next(line for line in listed if line.startswith("feb31"))
        assert "next run 20" in feb31 and "DISABLED" not in feb31
        assert worker.poll() is None
    finally:
        stop(worker, log)


async def test_the_dashboards_board_shows_a_disabled_schedule_and_its_error(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    _hand_written(db_url, "feb31", "0 0 31 2 *")
    _hand_written(db_url, "off", "0 3 * * *")
    execute(db_url, "UPDATE taskboard_schedules SET disabled_at = now(),"
                    " disabled_error = 'payload: refused' WHERE name = 'off'")
    board = await read_board(conn, database="test", mode="test")
    rows = {s.name: s for s in board.schedules}
    assert rows["feb31"].next_run is None and "CroniterBadDateError" in (rows["feb31"].error or "")
    assert rows["off"].next_run is None and rows["off"].error == "payload: refused"


# --- UTC whatever the session's zone ---------------------------------------------------------


def test_schedule_add_reads_cron_in_utc_when_the_database_zone_is_new_york(
    db_url: str,
) -> None:
    [dbname] = one(db_url, "SELECT current_database()")
    execute(db_url, f"ALTER DATABASE \"{dbname}\" SET timezone = 'America/New_York'")
    assert one(db_url, "SHOW timezone") == ("America/New_York",)
    [line] = ok(run_cli(db_url, "schedule", "add", "nightly", "--cron", "0 3 * * *", "noop"))
    # At 683562c: "(UTC), next run ... 03:00:00 EST" (the session's zone, five hours off).
    assert line.startswith("schedule nightly added: noop every '0 3 * * *' (UTC), next run ")
    assert line.endswith(" 03:00:00 UTC"), line
    [listed] = ok(run_cli(db_url, "schedule", "list"))
    assert listed.endswith("next run " + line.split("next run ")[1]), listed
    [row] = json.loads(ok_json(run_cli(db_url, "schedule", "list", "--json")))
    nxt = datetime.fromisoformat(row["next_run"])
    assert (nxt.utcoffset(), nxt.hour, nxt.minute) == (timedelta(0), 3, 0)


def test_a_schedule_in_an_explicit_zone_prints_its_next_run_there(db_url: str) -> None:
    [line] = ok(run_cli(db_url, "schedule", "add", "berlin", "--cron", "30 2 * * *", "--tz",
                        "Europe/Berlin", "noop"))
    assert "every '30 2 * * *' (Europe/Berlin), next run " in line
    assert line.endswith((" 02:30:00 CET", " 02:30:00 CEST")), line
    assert one(db_url, "SELECT tz FROM taskboard_schedules") == ("Europe/Berlin",)


def test_a_worker_whose_session_is_in_kathmandu_fires_the_utc_slot(
    db_url: str, tmp_path: Path
) -> None:
    # Kathmandu is UTC+05:45: its even minutes are UTC's odd ones. At 683562c a worker with
    # PGTZ=Asia/Kathmandu fired '*/2 * * * *' on odd UTC minutes, a UTC worker on even
    # ones: a job every minute between them.
    ok(run_cli(db_url, "schedule", "add", "every2", "--cron", "*/2 * * * *", "noop"))
    execute(db_url, "UPDATE taskboard_schedules SET created_at = now() - interval '10 minutes'")
    logs = [tmp_path / "ktm.log", tmp_path / "utc.log"]
    workers = [_worker(db_url, logs[0], "ktm", PGTZ="Asia/Kathmandu")]
    try:
        poll(lambda: one(db_url, "SELECT count(*) FROM taskboard_jobs")[0] >= 1,
             what="the Kathmandu worker fired the due slot")
        workers.append(_worker(db_url, logs[1], "utc", PGTZ="UTC"))
        poll(lambda: one(db_url, "SELECT count(*) FROM taskboard_workers"
                                 " WHERE id = 'utc'")[0] == 1, what="the UTC worker up")
        poll(lambda: one(db_url, "SELECT count(*) FROM taskboard_jobs"
                                 " WHERE completed_at IS NOT NULL")[0] >= 1,
             what="the slot's job completed")
    finally:
        for worker, log in zip(workers, logs, strict=False):
            stop(worker, log)
    keys = [k for (k,) in _rows(db_url, "SELECT unique_key FROM taskboard_jobs")]
    minutes = [datetime.fromisoformat(k.split(":", 2)[2].replace("Z", "+00:00")).minute
               for k in keys]
    assert minutes and all(m % 2 == 0 for m in minutes), keys
    assert len(keys) == len(set(keys)) <= 2, keys  # a slot boundary may pass during the test


# --- daylight saving in an explicit zone -----------------------------------------------------


def _z(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_a_0230_job_on_the_spring_forward_day_fires_once_at_the_jump() -> None:
    # Europe/Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC); 02:30 never is.
    days = [cron.following("30 2 * * *", "Europe/Berlin", _z("2026-03-27T12:00"))]
    for _ in range(2):
        days.append(cron.following("30 2 * * *", "Europe/Berlin", days[-1]))
    assert days == [_z("2026-03-28T01:30"),  # 02:30 CET
                    _z("2026-03-29T01:00"),  # the jump: 03:00 CEST
                    _z("2026-03-30T00:30")]  # 02:30 CEST
    # Going backwards agrees (the scheduler's due slot is the previous one).
    assert cron.previous("30 2 * * *", "Europe/Berlin", _z("2026-03-29T12:00")) == days[1]


def test_a_0230_job_on_the_fall_back_day_fires_once_at_its_first_occurrence() -> None:
    # Europe/Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET (01:00 UTC); 02:30
    # happens at 00:30 UTC and again at 01:30 UTC.
    first = cron.following("30 2 * * *", "Europe/Berlin", _z("2026-10-24T12:00"))
    assert first == _z("2026-10-25T00:30")
    assert cron.following("30 2 * * *", "Europe/Berlin", first) == _z("2026-10-26T01:30")
    assert cron.previous("30 2 * * *", "Europe/Berlin", _z("2026-10-25T12:00")) == first


def test_a_frequent_schedule_in_a_zone_pauses_for_the_repeated_hour() -> None:
    at, fired = _z("2026-10-24T23:50"), []
    while at < _z("2026-10-25T02:30"):
        at = cron.following("*/20 * * * *", "Europe/Berlin", at)
        fired.append(at.strftime("%H:%M"))
    assert fired == ["00:00", "00:20", "00:40", "02:00", "02:20", "02:40"]
    # Every second across the repeated hour: stepped over at once, not slot by slot.
    assert cron.following("* * * * * *", "Europe/Berlin", _z("2026-10-25T00:59:59")) == _z(
        "2026-10-25T02:00:00")


# --- helpers -------------------------------------------------------------------------------


def ok_json(proc: subprocess.CompletedProcess[str]) -> str:
    ok(proc)
    return proc.stdout


def _rows(url: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as c:
        return c.execute(query).fetchall()  # type: ignore[arg-type]
