"""`taskboard-tui` on a real terminal (a pty) ended by a signal, as a supervisor's `kill` or a
dropped ssh session ends it: the app exits 0 and its embedded workers drain (their rows say
stopped) instead of the process dying with the terminal in raw mode and its leases left to
expire."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from taskboard.core import builtin_registry, enqueue


def _drain_output(fd: int, seen: bytearray | None = None) -> None:
    # The app writes its frames to the pty; read them so it never blocks on a full buffer.
    while select.select([fd], [], [], 0)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return
        if not chunk:
            return
        if seen is not None:
            seen += chunk


def signalled(
    db_url: str, workers: int, ready: Callable[[psycopg.Connection[Any]], bool],
    signum: signal.Signals,
) -> tuple[int | None, str]:
    """Run the dashboard on a pty until `ready` holds, send it `signum`; its exit code and
    everything it wrote to the terminal."""
    env = {**os.environ, "TASKBOARD_DATABASE_URL": db_url, "TERM": "xterm-256color",
           "COLUMNS": "120", "LINES": "40"}
    env.pop("CI", None)  # nothing in the app depends on it; keep the run like a person's
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "taskboard.tui.main", "--workers", str(workers), "--lease", "5"],
        env=env, stdin=terminal, stdout=terminal, stderr=terminal, start_new_session=True,
    )
    os.close(terminal)
    seen = bytearray()
    try:
        deadline = time.monotonic() + 60
        while True:
            _drain_output(controller, seen)
            with psycopg.connect(db_url) as c:
                if ready(c):
                    break
            assert time.monotonic() < deadline, "the dashboard never got ready"
            time.sleep(0.1)
        time.sleep(0.5)  # the app's first frames are drawn
        proc.send_signal(signum)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            _drain_output(controller, seen)
            time.sleep(0.05)
        _drain_output(controller, seen)
        return proc.poll(), seen.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(controller)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_the_dashboard_cleanly_and_drains_its_workers(
    db_url: str, signum: signal.Signals
) -> None:
    def running(c: psycopg.Connection[Any]) -> bool:
        row = c.execute("SELECT count(*) FROM taskboard_workers WHERE stopped_at IS NULL"
                        ).fetchone()
        return row == (2,)

    code, text = signalled(db_url, 2, running, signum)
    assert code == 0
    assert "taskboard-tui: stopping" not in text  # an idle quit has no drain to tell of
    with psycopg.connect(db_url) as c:
        rows = c.execute("SELECT state, stopped_at IS NOT NULL FROM taskboard_workers").fetchall()
    assert rows and all(stopped for _, stopped in rows), rows


def test_a_quit_with_jobs_running_says_what_it_waits_for_and_how_they_ended(
    db_url: str,
) -> None:
    """Once the screen is gone, a drain with jobs running used to leave the terminal blank
    for up to its limit, and nothing said what became of the jobs."""
    with psycopg.connect(db_url, autocommit=True) as c:
        ids = [enqueue(c, builtin_registry(), "sleep", {"seconds": 60}) for _ in range(3)]

    def held(c: psycopg.Connection[Any]) -> bool:
        row = c.execute("SELECT count(*) FROM taskboard_jobs WHERE id = ANY(%s)"
                        " AND lease_token IS NOT NULL", (ids,)).fetchone()
        return row == (3,)

    code, text = signalled(db_url, 1, held, signal.SIGTERM)  # what `q` does
    assert code == 0
    assert ("taskboard-tui: stopping 1 embedded worker: 3 jobs running get up to 2.5 s to "
            "finish, then are released to other workers") in text
    assert "taskboard-tui: stopped: 0 completed, 3 released to other workers\r\n" in text
    with psycopg.connect(db_url) as c:
        rows = c.execute("SELECT lease_token, completed_at FROM taskboard_jobs"
                         " WHERE id = ANY(%s)", (ids,)).fetchall()
    assert rows == [(None, None)] * 3  # back in the queue for the next worker
