"""Tracing the way Python users turn it on: `opentelemetry-instrument` with the standard
`OTEL_*` variables around a real `taskboard worker --burst`, and nothing at all without it."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.test_cli import CLI, run_cli
from tests.tui.test_signals import _drain_output

BIN = Path(sys.executable).parent
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def console_spans(stdout: str) -> list[dict[str, Any]]:
    """The spans the console exporter printed: one pretty-printed JSON object each."""
    decoder = json.JSONDecoder()
    found, at = [], 0
    while (start := stdout.find("{", at)) != -1:
        try:
            obj, at = decoder.raw_decode(stdout, start)
        except json.JSONDecodeError:
            at = start + 1
            continue
        if isinstance(obj, dict) and "context" in obj and "kind" in obj:
            found.append(obj)
    return found


def test_worker_under_opentelemetry_instrument_prints_attempt_spans_in_the_enqueuers_trace(
    db_url: str,
) -> None:
    # Enqueued by a request whose trace context we know (as a web framework's would be).
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO taskboard_jobs (kind, traceparent) SELECT 'noop', %s"
            " FROM generate_series(1, 3)", (TRACEPARENT,),
        )
    env = {
        **os.environ,
        "TASKBOARD_DATABASE_URL": db_url,
        "OTEL_SERVICE_NAME": "taskboard-worker",
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }
    proc = subprocess.run(
        [str(BIN / "opentelemetry-instrument"), str(BIN / "taskboard"), "worker", "--burst",
         "--log-every-job", "--id", "traced", "--pool-size", "4", "--lease", "5"],
        env=env, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    attempts = [s for s in console_spans(proc.stdout) if s["kind"] == "SpanKind.CONSUMER"]
    assert len(attempts) == 3, proc.stdout[-3000:]
    for span in attempts:
        assert span["context"]["trace_id"] == "0x4bf92f3577b34da6a3ce929d0e0e4736"
        assert span["parent_id"] == "0x00f067aa0ba902b7"
        assert span["attributes"]["messaging.system"] == "taskboard"
        assert span["attributes"]["taskboard.worker.id"] == "traced"
        assert span["attributes"]["taskboard.outcome"] == "completed"
        assert span["resource"]["attributes"]["service.name"] == "taskboard-worker"
    # Every log line of an attempt joins its trace.
    completed = [json.loads(line) for line in proc.stderr.splitlines()
                 if line.startswith("{") and '"event": "completed"' in line]
    assert len(completed) == 3, proc.stderr[-3000:]
    span_ids = {s["context"]["span_id"].removeprefix("0x") for s in attempts}
    for line in completed:
        assert line["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert line["span_id"] in span_ids


def test_without_an_sdk_nothing_is_stored_and_nothing_printed(db_url: str) -> None:
    proc = run_cli(db_url, "enqueue", "noop")
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout.split()[0])
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT traceparent, tracestate FROM taskboard_jobs WHERE id = %s", (job_id,)
        ).fetchone()
    assert row == (None, None)
    history = run_cli(db_url, "history", str(job_id))
    assert history.returncode == 0, history.stderr
    assert not [line for line in history.stdout.splitlines() if line.startswith("trace ")]
    # A job enqueued by a traced service elsewhere: its attempt's log lines name that trace
    # even here, with no SDK (the context passes through; no span is made).
    with psycopg.connect(db_url, autocommit=True) as conn:
        traced = conn.execute("INSERT INTO taskboard_jobs (kind, traceparent) VALUES ('noop', %s)"
                              " RETURNING id", (TRACEPARENT,)).fetchone()
    assert traced is not None
    burst = subprocess.run(
        [*CLI, "worker", "--burst", "--log-every-job", "--id", "plain", "--pool-size", "4",
         "--lease", "5"],
        env={**os.environ, "TASKBOARD_DATABASE_URL": db_url}, capture_output=True, text=True,
        timeout=60, stdin=subprocess.DEVNULL,
    )
    assert burst.returncode == 0, burst.stderr[-3000:]
    completed = {line["job_id"]: line for line in map(json.loads, _json_lines(burst.stderr))
                 if line.get("event") == "completed"}
    assert set(completed) == {job_id, traced[0]}, burst.stderr[-3000:]
    assert "trace_id" not in completed[job_id]
    assert completed[traced[0]]["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert console_spans(burst.stdout) == []


def _json_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("{")]


def test_a_retry_with_no_sdk_leaves_the_job_in_the_trace_it_had(db_url: str) -> None:
    """`taskboard retry` with no SDK (and no caller's span) has no context to give: the
    job keeps the one it had, so its new attempts still join a trace."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO taskboard_jobs (kind, traceparent, tracestate, failed_at)"
            " VALUES ('noop', %s, 'k=v', now()) RETURNING id", (TRACEPARENT,),
        ).fetchone()
    assert row is not None
    proc = run_cli(db_url, "retry", str(row[0]))
    assert proc.returncode == 0, proc.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:
        after = conn.execute(
            "SELECT traceparent, tracestate, failed_at FROM taskboard_jobs WHERE id = %s",
            (row[0],),
        ).fetchone()
    assert after == (TRACEPARENT, "k=v", None)


def test_dashboard_under_opentelemetry_instrument_prints_its_workers_attempt_spans(
    db_url: str, tmp_path: Path
) -> None:
    """`opentelemetry-instrument taskboard-tui` (on a pty, as a person runs it; the console
    exporter's output sent to a file): the dashboard's embedded workers emit the same
    attempt spans a `taskboard worker` does, in the enqueuer's trace."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO taskboard_jobs (kind, traceparent) SELECT 'noop', %s"
            " FROM generate_series(1, 3)", (TRACEPARENT,),
        )
    env = {
        **os.environ,
        "TASKBOARD_DATABASE_URL": db_url,
        "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40",
        "OTEL_SERVICE_NAME": "taskboard-tui",
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }
    env.pop("CI", None)
    out = tmp_path / "spans.txt"
    controller, terminal = pty.openpty()
    with out.open("w") as stdout:
        proc = subprocess.Popen(
            [str(BIN / "opentelemetry-instrument"), str(BIN / "taskboard-tui"),
             "--workers", "2", "--lease", "5"],
            env=env, stdin=terminal, stdout=stdout, stderr=terminal, start_new_session=True,
        )
    os.close(terminal)
    screen = bytearray()
    try:
        def all_completed() -> bool:
            while select.select([controller], [], [], 0)[0]:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                screen.extend(chunk)
            with psycopg.connect(db_url) as c:
                row = c.execute(
                    "SELECT count(*) FILTER (WHERE completed_at IS NOT NULL) FROM taskboard_jobs"
                ).fetchone()
            # The app has taken the terminal (its signal handlers are in place by then).
            return row is not None and row[0] == 3 and b"\x1b[?1049h" in screen

        deadline = time.monotonic() + 60
        while not all_completed():
            assert proc.poll() is None, f"the dashboard exited {proc.returncode}"
            assert time.monotonic() < deadline, "the dashboard's workers never ran the jobs"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)  # ends it cleanly: the exporter flushes at exit
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            _drain_output(controller)
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(controller)
    assert proc.returncode == 0
    text = out.read_text()
    attempts = [s for s in console_spans(text) if s["kind"] == "SpanKind.CONSUMER"]
    assert len(attempts) == 3, text[-3000:]
    for span in attempts:
        assert span["context"]["trace_id"] == "0x4bf92f3577b34da6a3ce929d0e0e4736"
        assert span["parent_id"] == "0x00f067aa0ba902b7"
        assert span["attributes"]["taskboard.outcome"] == "completed"
        assert span["resource"]["attributes"]["service.name"] == "taskboard-tui"
