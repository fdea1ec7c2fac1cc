"""`--log-format text` keeps every field of an event as key=value (issue 26: it printed
"INFO taskboard.events claimed" and nothing else)."""

from __future__ import annotations

import io
import json
import logging
import shlex

from taskboard.core.runtime.logs import configure

from tests.test_cli import run_cli


def test_a_text_log_line_of_a_worker_event_carries_its_fields(db_url: str) -> None:
    assert run_cli(db_url, "enqueue", "noop").returncode == 0
    proc = run_cli(db_url, "worker", "--burst", "--id", "textlog", "--log-format", "text",
                   "--log-every-job")
    assert proc.returncode == 0, proc.stderr
    [claimed] = [line for line in proc.stderr.splitlines() if " claimed " in line + " "]
    fields = dict(p.split("=", 1) for p in shlex.split(claimed) if "=" in p)
    assert fields["worker_id"] == "textlog", claimed
    assert fields["job_id"] == "1" and fields["kind"] == "noop", claimed
    assert len(fields["token"]) >= 8, claimed


def test_text_values_that_would_split_are_quoted_and_read_back() -> None:
    out = io.StringIO()
    configure("text", stream=out)
    try:
        logging.getLogger("taskboard.events").info(
            "failed", extra={"fields": {"event": "failed", "error": 'boom = "bad"\nline 2',
                                        "job": 7, "payload": {"a": 1}, "empty": ""}},
        )
    finally:
        configure("json")
    line = out.getvalue().strip()
    assert "\n" not in line
    fields = dict(p.split("=", 1) for p in shlex.split(line) if "=" in p)
    # JSON-quoted: the shell-style split keeps its escaped line break as `\n`.
    assert fields["error"] == 'boom = "bad"\\nline 2', line
    assert fields["job"] == "7" and fields["empty"] == "", line
    assert json.loads(fields["payload"]) == {"a": 1}, line
    assert " event=" not in line  # the event's name is the message already
