"""`taskboard-tui` refuses to open the UI on a bad start: one line, exit 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest


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
        (["--pool-size", "2"], "pool size must be at least 3"),
        (["--lease", "0"], "lease must be a positive"),
        (["--workers", "-1"], "--workers must be 0 or more"),
        (["--workers", "many"], "invalid int value"),
    ],
)
def test_bad_flags_are_refused(db_url: str, args: list[str], needle: str) -> None:
    assert_refused(start(db_url, *args), needle)
