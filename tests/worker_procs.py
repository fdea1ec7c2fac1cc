"""Real `taskboard worker` processes running `tests.apps.policies`, and polling helpers, for
the per-kind policy and fleet-limit tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
APP = "tests.apps.policies:registry"


def start(url: str, log_dir: Path, worker_id: str, *args: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("TASKBOARD_APP", "DATABASE_URL")}
    env["TASKBOARD_DATABASE_URL"] = url
    with (log_dir / f"{worker_id}.log").open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "taskboard.core.cli", "worker", "--app", APP, "--id",
             worker_id, "--pool-size", "4", "--poll", "0.5", *args],
            env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL, cwd=ROOT,
        )


@contextmanager
def workers(url: str, log_dir: Path, count: int, *args: str,
            prefix: str = "w") -> Iterator[list[subprocess.Popen[bytes]]]:
    """`count` worker processes, running once this yields; stopped (SIGTERM, and SIGKILL
    for one that does not stop) however the test ends."""
    procs = [start(url, log_dir, f"{prefix}{i}", *args) for i in range(count)]
    try:
        until(url, "SELECT count(*) = %s FROM taskboard_workers WHERE state = 'running'"
              " AND left(id, length(%s)) = %s", count, prefix, prefix, timeout=60)
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def one(url: str, query: str, *args: Any) -> tuple[Any, ...]:
    with psycopg.connect(url) as conn:
        row = conn.execute(query, args).fetchone()
    assert row is not None
    return tuple(row)


def rows(url: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return [tuple(r) for r in conn.execute(query, args).fetchall()]


def until(url: str, query: str, *args: Any, timeout: float, step: float = 0.05) -> float:
    """Poll `query` until its first column is true; the seconds it took. Fails the test
    after `timeout` seconds."""
    start_at = time.monotonic()
    while time.monotonic() - start_at < timeout:
        if one(url, query, *args)[0]:
            return time.monotonic() - start_at
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for: {query}")


def enqueue(url: str, kind: str, count: int, seconds: float = 0.0) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO taskboard_jobs (kind, payload)"
            " SELECT %s, jsonb_build_object('seconds', %s::float8)"
            "   FROM generate_series(1, %s)", (kind, seconds, count))
