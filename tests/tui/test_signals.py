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

import psycopg
import pytest


def _drain_output(fd: int) -> None:
    # The app writes its frames to the pty; read them so it never blocks on a full buffer.
    while select.select([fd], [], [], 0)[0]:
        try:
            if not os.read(fd, 65536):
                return
        except OSError:
            return


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_the_dashboard_cleanly_and_drains_its_workers(
    db_url: str, signum: signal.Signals
) -> None:
    env = {**os.environ, "TASKBOARD_DATABASE_URL": db_url, "TERM": "xterm-256color",
           "COLUMNS": "120", "LINES": "40"}
    env.pop("CI", None)  # nothing in the app depends on it; keep the run like a person's
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "taskboard.tui.main", "--workers", "2", "--lease", "5"],
        env=env, stdin=terminal, stdout=terminal, stderr=terminal, start_new_session=True,
    )
    os.close(terminal)
    try:
        def running() -> bool:
            _drain_output(controller)
            with psycopg.connect(db_url) as c:
                row = c.execute(
                    "SELECT count(*) FROM taskboard_workers WHERE stopped_at IS NULL"
                ).fetchone()
            return row is not None and row[0] == 2

        deadline = time.monotonic() + 60
        while not running():
            assert time.monotonic() < deadline, "the dashboard's workers never registered"
            time.sleep(0.1)
        time.sleep(0.5)  # the app's first frames are drawn
        proc.send_signal(signum)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            _drain_output(controller)
            time.sleep(0.05)
        code = proc.poll()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(controller)
    assert code == 0
    with psycopg.connect(db_url) as c:
        rows = c.execute("SELECT state, stopped_at IS NOT NULL FROM taskboard_workers").fetchall()
    assert rows and all(stopped for _, stopped in rows), rows
