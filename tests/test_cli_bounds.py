"""Bounds on configuration and input, as scripts meet them: the real `taskboard` command,
one stderr line naming what is wrong, exit 2, at once, and nothing opened or written.

Each case here was once accepted: a lease of 10 ms or 1e300 s, a retry base putting the
next try in 2047 (or, at 1e13 s, making the failure statement itself fail), a renewal
every nanosecond (a busy loop), a pool of 100,000 connections (6,751 pool warnings before
exit 2, holding every free slot of the server meanwhile), a payload nested 1,500 deep (a
RecursionError traceback), a run-at stored as 1 BC, and queue names with line breaks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from taskboard.core.sql import FREE_CONNECTION_SLOTS

from tests.test_cli import assert_one_line_error, job_count, run_cli

# Interpreter start-up is most of it; a worker that tried to connect to a pool, retried or
# logged warnings would take much longer.
QUICK_SECONDS = 5.0


class BackendWatch:
    """The most backends seen on one database (other than this watch's own), sampled every
    few milliseconds from a connection to another database, while the block runs."""

    def __init__(self, server_url: str, dbname: str) -> None:
        self.server_url = server_url
        self.dbname = dbname
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()

    def _run(self) -> None:
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            self._ready.set()
            while not self._stop.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = %s AND backend_type = 'client backend'",
                    (self.dbname,),
                ).fetchone()
                self.most = max(self.most, int(row[0]) if row else 0)
                time.sleep(0.005)

    def __enter__(self) -> BackendWatch:
        self._thread.start()
        assert self._ready.wait(10), "the watch could not connect"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _dbname(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def _worker_rows(url: str) -> int:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT count(*) FROM taskboard_workers").fetchone()
        assert row is not None
        return int(row[0])


def _timed(url: str, *args: str) -> tuple[Any, float]:
    started = time.monotonic()
    proc = run_cli(url, *args, timeout=60)
    return proc, time.monotonic() - started


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        # Below a second, healthy jobs died "stopped renewing" while renewing.
        (["--lease", "0.01"], ["lease must be between 1 and 86400 seconds"]),
        # make_interval failed inside every claim: the worker never claimed anything.
        (["--lease", "1e300"], ["lease must be between 1 and 86400 seconds"]),
        (["--lease", "0"], ["lease must be between 1 and 86400 seconds"]),
        (["--lease", "nan"], ["--lease", "finite"]),
        # The README's cap is 600 s; a base above it is not "the first backoff" any more.
        (["--retry-base", "1e9"], ["retry base must be between 0 and 600"]),
        (["--retry-base", "-1"], ["retry base"]),
        # At 1e13 s the FAIL statement itself errored and the error was never recorded.
        (["--retry-base", "1e13", "--retry-max", "1e13"], ["retry cap", "604800"]),
        (["--retry-max", "1e9"], ["retry cap", "604800"]),
        (["--retry-base", "700", "--retry-max", "600"], ["retry base", "retry cap"]),
        (["--renew-every", "1e-9"], ["renewal interval must be between 0.1"]),  # busy loop
        (["--lease", "10", "--renew-every", "6"], ["renewal interval", "half the lease"]),
        (["--pool-size", "100000"], ["pool size must be between 3 and 1000"]),
        (["--pool-size", "2"], ["pool size must be between 3 and 1000"]),
        (["--queue", "mail\nbox"], ["--queue", "line break or control character"]),
        (["--queue", "mail\u2028box"], ["--queue", "U+2028"]),
        (["--queue", ""], ["--queue", "must not be empty"]),
        (["--poll", "1e-9"], ["fallback poll"]),
    ],
    ids=lambda v: " ".join(v)[:40].replace("\n", "\\n") if isinstance(v, list) else None,
)
def test_bad_worker_settings_are_refused_at_once_without_connecting(
    db_url: str, pg_server_url: str, args: list[str], needles: list[str]
) -> None:
    with BackendWatch(pg_server_url, _dbname(db_url)) as watch:
        proc, took = _timed(db_url, "worker", "--id", "bounds", *args)
    assert_one_line_error(proc, *needles)
    assert proc.stdout == ""
    assert took < QUICK_SECONDS, f"took {took:.1f} s"
    assert watch.most == 0, f"{watch.most} connections were opened for a refused setting"
    assert _worker_rows(db_url) == 0


@contextmanager
def _held_connections(url: str, count: int) -> Iterator[None]:
    with ExitStack() as stack:
        for _ in range(count):
            stack.enter_context(psycopg.connect(url, autocommit=True))
        yield


def _free_slots(url: str) -> tuple[int, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(FREE_CONNECTION_SLOTS).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])


def test_a_pool_larger_than_the_servers_free_slots_is_refused_before_opening(
    db_url: str, pg_server_url: str
) -> None:
    # The test holds some connections (on another database), so the server has fewer free
    # slots than a pool the settings bounds allow: 290 against max_connections 300, say.
    with _held_connections(pg_server_url, 12):
        free, total = _free_slots(pg_server_url)  # its own connection is closed again
        pool = free + 3  # the worker's own check is one of its pool's connections to be
        if not 3 <= pool <= 1000:
            pytest.skip(f"the server has {free} free connection slots of {total}")
        with BackendWatch(pg_server_url, _dbname(db_url)) as watch:
            proc, took = _timed(db_url, "worker", "--id", "greedy", "--pool-size", str(pool))
    assert_one_line_error(proc, f"pool size {pool}", "free", f"max_connections {total}")
    assert took < QUICK_SECONDS, f"took {took:.1f} s"
    # The one connection that measured the budget, and not one of the pool's.
    assert watch.most <= 1, f"{watch.most} connections were opened"
    assert _worker_rows(db_url) == 0


def test_a_pool_within_the_free_slots_still_starts(db_url: str) -> None:
    # The budget check must not refuse what fits: a worker with the defaults starts and
    # registers; SIGTERM drains it (exit 0).
    env = {**os.environ, "TASKBOARD_DATABASE_URL": db_url}
    env.pop("DATABASE_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "taskboard.core.cli", "worker", "--id", "fits"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _worker_rows(db_url) == 0:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        assert _worker_rows(db_url) == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def _nested(depth: int, opener: str, closer: str, leaf: str = "") -> str:
    return opener * depth + leaf + closer * depth


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        # A RecursionError traceback and exit 1, once.
        (["enqueue", "noop", "--payload", '{"a": ' + _nested(1500, "[", "]") + "}"],
         ["payload", "nested deeper than 64 levels"]),
        (["enqueue", "noop", "--payload", _nested(1500, '{"a": ', "}", "1")],
         ["payload", "nested deeper than 64 levels"]),
        (["enqueue", "noop", "--payload", '{"a": ' + _nested(100, "[", "]") + "}"],
         ["nested deeper than 64 levels"]),
        # Stored as 1 BC; the worker then logged "timestamp too small" instead of a dead
        # event.
        (["enqueue", "noop", "--run-at", "0001-01-01T00:00:00+14:00"],
         ["run_at", "must be between 1970-01-01 and 9999-01-01"]),
        (["enqueue", "noop", "--run-at", "9999-12-31T23:59:59-14:00"],
         ["run_at", "must be between"]),
        (["enqueue", "noop", "--queue", "mail\nbox"], ["--queue", "line break"]),
        (["enqueue", "noop", "--queue", "mail\rbox"], ["--queue", "line break"]),
        (["enqueue", "noop", "--queue", "mail\x1b[31mbox"], ["--queue", "control character"]),
        (["enqueue", "noop", "--queue", "mail\x85box"], ["--queue", "control character"]),
        (["enqueue", "noop", "--queue", "mail\u2029box"], ["--queue", "U+2029"]),
        (["enqueue", "noop", "--queue", "\u202eliam"], ["--queue", "U+202E"]),
        (["enqueue", "noop", "--queue", " padded"], ["--queue", "starts or ends with a space"]),
        (["enqueue", "noop", "--queue", "q" * 101], ["--queue", "longer than 100"]),
    ],
    ids=lambda v: " ".join(v)[:40].encode("unicode_escape").decode()
    if isinstance(v, list) else None,
)
def test_bad_enqueue_input_is_one_line_exit_2_and_writes_nothing(
    db_url: str, args: list[str], needles: list[str]
) -> None:
    proc, took = _timed(db_url, *args)
    assert_one_line_error(proc, *needles)
    assert proc.stdout == ""
    assert took < QUICK_SECONDS, f"took {took:.1f} s"
    assert job_count(db_url) == 0


def test_the_bounds_themselves_are_accepted(db_url: str) -> None:
    # The edges of the bounds are valid: the first and last run-at, a 100-character queue.
    for args in (
        ["enqueue", "noop", "--run-at", "1970-01-01T00:00:00Z"],
        ["enqueue", "noop", "--run-at", "9999-01-01T00:00:00Z"],
        ["enqueue", "noop", "--queue", "q" * 100],
    ):
        proc = run_cli(db_url, *args)
        assert proc.returncode == 0, (args[:4], proc.stderr)
    assert job_count(db_url) == 3
