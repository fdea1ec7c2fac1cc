"""`taskboard-tui` refuses to open the UI on a bad start: one line, exit 2, no traceback."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import psycopg
import pytest
from taskboard.core.sql import FREE_CONNECTION_SLOTS


def start(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TASKBOARD_DATABASE_URL": url}
    return subprocess.run([sys.executable, "-m", "taskboard.tui.main", *args], env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def assert_refused(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""  # the UI never opened


def test_unreachable_database_is_refused_with_the_password_masked() -> None:
    proc = start("postgresql://maya:hunter2-secret@127.0.0.1:1/app")
    assert_refused(proc, "cannot connect to postgresql://maya:***@127.0.0.1:1/app")
    assert "hunter2-secret" not in proc.stderr


def test_schema_from_a_newer_taskboard_is_refused(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("INSERT INTO taskboard_schema (version) VALUES (42)")
    assert_refused(start(db_url), "schema is version 42")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--pool-size", "2"], "pool size must be between 3 and 1000"),
        (["--pool-size", "100000"], "pool size must be between 3 and 1000"),
        (["--lease", "0"], "lease must be between 1 and 86400"),
        (["--lease", "1e300"], "lease must be between 1 and 86400"),
        (["--lease", "nan"], "must be a finite number"),
        (["--workers", "-1"], "--workers must be between 0 and 100"),
        (["--workers", "1000"], "--workers must be between 0 and 100"),
        (["--workers", "many"], "not an integer"),
        (["--workers", "1\n2"], "not an integer"),
        # A NaN refresh was accepted and handed to the UI's timer.
        (["--refresh", "nan"], "must be a finite number"),
        (["--refresh", "0"], "--refresh must be between 0.1 and 60"),
        (["--refresh", "1e300"], "--refresh must be between 0.1 and 60"),
    ],
)
def test_bad_flags_are_refused(db_url: str, args: list[str], needle: str) -> None:
    assert_refused(start(db_url, *args), needle)


def test_a_fleet_larger_than_the_servers_free_slots_is_refused_before_any_pool_opens(
    db_url: str,
) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        row = c.execute(FREE_CONNECTION_SLOTS).fetchone()
    assert row is not None
    free, total = int(row[0]), int(row[1])
    workers = 3
    pool = min(1000, free // workers + 2)  # workers * pool is more than the free slots
    if workers * pool + 1 <= free + 1:
        pytest.skip(f"the server has {free} free connection slots of {total}")
    proc = start(db_url, "--workers", str(workers), "--pool-size", str(pool))
    assert_refused(proc, "free")
    assert f"max_connections {total}" in proc.stderr
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM taskboard_workers").fetchone() == (0,)


def test_without_a_terminal_the_dashboard_is_refused_before_any_worker_starts(
    db_url: str,
) -> None:
    """Run from a supervisor or with `</dev/null`, the dashboard used to start and spin a core
    for as long as it ran (Textual's input thread polling a stdin at its end), its screen
    drawn for nobody. The database is checked first: its errors say more."""
    proc = start(db_url, "--workers", "2")
    assert_refused(proc, "the dashboard needs a terminal to read keys from (stdin) and to "
                         "draw on (stderr); neither is one")
    assert "taskboard worker" in proc.stderr and "--serve" in proc.stderr
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM taskboard_workers").fetchone() == (0,)


def test_with_keys_but_its_screen_sent_to_a_file_the_dashboard_is_refused(db_url: str) -> None:
    """`taskboard-tui 2>log` on a terminal: the screen would have filled the log."""
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "taskboard.tui.main", "--workers", "1"],
            env={**os.environ, "TASKBOARD_DATABASE_URL": db_url}, stdin=terminal,
            capture_output=True, text=True, timeout=60,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert_refused(proc, "(stderr); stderr is not one")


@pytest.mark.parametrize("args", [["--help"], ["--workers", "many"]])
def test_help_and_a_refused_flag_do_not_import_the_dashboard_or_the_fleet(
    args: list[str],
) -> None:
    """Both answered in 1.2 s of CPU when Textual, aiohttp and the fleet were imported
    before the flags were read; they need none of them."""
    probe = (
        "import sys\n"
        "from taskboard.tui.main import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit as stop:\n"
        "    code = stop.code\n"
        "heavy = ['textual', 'aiohttp', 'textual_serve', 'taskboard.core.fleet.fleet',\n"
        "         'taskboard.core.engine.worker']\n"
        "print('exit', code, 'imported', sorted(m for m in heavy if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    last = proc.stdout.strip().splitlines()[-1]
    assert last == f"exit {0 if args == ['--help'] else 2} imported []", (proc.stdout,
                                                                           proc.stderr)
