"""The README's command-line examples (and its SQL one), run as written on a fresh
database: each shell block is read from README.md, its lines split as a shell would
(quotes, `\\` continuations, `# comments`), and each command run with the project's
`taskboard`. An optional `[--json]` is run both ways; a block written as a session (`$ `
prompts) is checked against the output it shows. A worker line runs until it has started
and is then stopped as a supervisor would (SIGTERM): it serves until then.

The first queue and the logs are run by tests/test_readme.py; the blocks named in
NOT_RUN below are not commands a test can run (the quick start's interactive dashboard and
installs, benchmarks of minutes), each with its reason. Of the SQL blocks, the lease
protocol's UPDATE is a sketch of the engine's statement ($1, `...`), not an example."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.readme_blocks import README, blocks

TASKBOARD = Path(sys.executable).parent / "taskboard"

RETENTION = "taskboard worker --keep-completed 12h"
TIMEOUT = "taskboard enqueue sleep --payload"
UNIQUE_KEY = "--key invoice-42"
SCHEDULES = "taskboard schedule add nightly-report"
PAUSE = "taskboard queue pause billing"
RUN_HERE = (RETENTION, TIMEOUT, UNIQUE_KEY, SCHEDULES, PAUSE)
RUN_ELSEWHERE = (
    "taskboard enqueue greet --app hello:registry",  # tests/test_readme.py, first queue
    "for i in 1 2 3; do taskboard enqueue noop",  # tests/test_readme.py, logs
)
NOT_RUN = {
    "uv run taskboard-tui      #": "the quick start: an interactive dashboard and the suite",
    "pip install . && taskboard-tui": "the quick start without uv: an install",
    "python3 -m venv .venv && . .venv/bin/activate && pip install .\n": "an install",
    "uv run taskboard-tui --serve": "a server for browsers (tests/tui/test_browser.py)",
    "uv run --group bench": "benchmarks: minutes each, outside the suite",
    "uv run python bench/soak.py": "the fault soak: minutes, outside the suite",
    "uv run pytest                          # all tests": "the suite itself, lint and types",
}


def shell_blocks() -> list[str]:
    return [code for _, code in blocks(README, "sh")]


def block(marker: str) -> str:
    found = [code for code in shell_blocks() if marker in code]
    assert len(found) == 1, f"{len(found)} shell blocks in README.md contain {marker!r}"
    return found[0]


def commands(code: str) -> list[list[str]]:
    """Each command of a block as argv; in a `$ ` session, the output lines are skipped."""
    lines = code.replace("\\\n", " ").splitlines()
    session = any(line.startswith("$ ") for line in lines)
    found = []
    for line in lines:
        if session:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        argv = shlex.split(line, comments=True)
        if argv:
            assert argv[0] == "taskboard", line
            found.append(argv)
    return found


def variants(argv: list[str]) -> list[list[str]]:
    if "[--json]" not in argv:
        return [argv]
    plain = [a for a in argv if a != "[--json]"]
    return [plain, [*plain, "--json"]]


def environment(db_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "TASKBOARD_APP", "PYTHONPATH")}
    env["TASKBOARD_DATABASE_URL"] = db_url
    return env


def taskboard(db_url: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TASKBOARD), *argv[1:]], env=environment(db_url),
                          capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def ran(db_url: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    proc = taskboard(db_url, argv)
    assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
    return proc


def test_every_shell_example_is_run_here_or_named() -> None:
    """A new shell example in the README is run by a test, or given a reason here."""
    for code in shell_blocks():
        markers = [m for m in (*RUN_HERE, *RUN_ELSEWHERE, *NOT_RUN) if m in code]
        assert len(markers) == 1, f"a shell example no test runs (or two markers):\n{code}"


def test_the_retention_example_runs_as_written(db_url: str, tmp_path: Path) -> None:
    for argv in commands(block(RETENTION)):
        if argv[1] != "worker":
            proc = ran(db_url, argv)
            assert proc.stdout.startswith("pruned 0 finished jobs and 0 workers"), proc.stdout
            continue
        log = tmp_path / "worker.log"
        with log.open("w") as err:
            worker = subprocess.Popen([str(TASKBOARD), *argv[1:]], env=environment(db_url),
                                      stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        try:
            deadline = time.monotonic() + 30
            while "worker_started" not in log.read_text():
                assert worker.poll() is None, (argv, log.read_text())
                assert time.monotonic() < deadline, (argv, log.read_text())
                time.sleep(0.05)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(30) == 0, (argv, log.read_text())
        finally:
            worker.kill()
            worker.wait(10)


def test_the_timeout_example_runs_as_written(db_url: str) -> None:
    [argv] = commands(block(TIMEOUT))
    job_id = int(ran(db_url, argv).stdout)
    with psycopg.connect(db_url) as c:
        row = c.execute("SELECT kind, payload, timeout_seconds FROM taskboard_jobs"
                        " WHERE id = %s", (job_id,)).fetchone()
    assert row == ("sleep", {"seconds": 120}, 30)


def test_the_unique_key_session_prints_what_it_shows(db_url: str) -> None:
    code = block(UNIQUE_KEY)
    first, second = commands(code)
    # The README's session, with its job's id (17 there) in place of this database's.
    # (Output, not commands: a comment is what follows two spaces and a #.)
    shown = [re.sub(r"\s{2,}#.*$", "", line) for line in code.splitlines()
             if not line.startswith("$ ")]
    assert shown == ["17", "17", "already enqueued as #17"]
    one = ran(db_url, first)
    job_id = int(one.stdout)
    again = ran(db_url, second)
    assert again.stdout == f"{job_id}\n"
    assert again.stderr == f"already enqueued as #{job_id}\n"


def _schedules(db_url: str) -> list[Any]:
    listed = json.loads(ran(db_url, ["taskboard", "schedule", "list", "--json"]).stdout)
    return sorted(s["name"] for s in listed)


def test_the_schedules_example_runs_as_written(db_url: str) -> None:
    listed: list[str] = []
    for argv in commands(block(SCHEDULES)):
        for command in variants(argv):
            proc = ran(db_url, command)
            if command[1:3] == ["schedule", "list"] and "--json" not in command:
                listed = proc.stdout.splitlines()
    assert any(line.startswith("nightly-report") for line in listed), listed
    assert any(line.startswith("backup") for line in listed), listed
    assert _schedules(db_url) == ["backup"]  # the last line removed the nightly report


def test_the_queue_pause_example_runs_as_written(db_url: str) -> None:
    paused_while_listed = None
    for argv in commands(block(PAUSE)):
        for command in variants(argv):
            proc = ran(db_url, command)
            if command[1:3] == ["queue", "list"] and "--json" in command:
                queues = json.loads(proc.stdout)
                paused_while_listed = [q for q in queues if q.get("paused")]
    assert paused_while_listed, "queue list did not show billing paused"
    with psycopg.connect(db_url) as c:
        row = c.execute("SELECT paused_at FROM taskboard_queues WHERE name = 'billing'"
                        ).fetchone()
    assert row is None or row[0] is None  # resumed by the block's last line


@pytest.mark.parametrize("marker", list(NOT_RUN))
def test_what_is_not_run_is_still_in_the_readme(marker: str) -> None:
    """A reason kept for a block that is gone would hide the next one."""
    assert any(marker in code for code in shell_blocks()), marker


def synopsis() -> dict[tuple[str, ...], set[str]]:
    """The flags the README's command-line synopsis gives each command."""
    text = README[README.index("\n## Command line\n"):]
    [(_, listing)] = blocks(text[:text.index("\n## ", 1)], "")
    flags: dict[tuple[str, ...], set[str]] = {}
    last: list[tuple[str, ...]] = []
    for line in listing.splitlines():
        line = line.split("#", 1)[0]
        if line.startswith("taskboard "):
            for alternative in line.split(" | "):
                words = alternative.split()[1:]
                command = tuple(w for w in words[:2] if w.islower() and w[0].isalpha())
                last = [(each, *command[1:]) for each in command[0].split("|")]
                for named in last:
                    flags.setdefault(named, set()).update(re.findall(r"--[a-z-]+", alternative))
        else:
            for named in last:
                flags[named].update(re.findall(r"--[a-z-]+", line))
    return flags


def test_the_command_line_synopsis_names_only_flags_the_commands_take() -> None:
    flags = synopsis()
    assert len(flags) >= 15 and ("schedule", "add") in flags and ("cancel",) in flags
    for command, named in sorted(flags.items()):
        help_text = ran("", ["taskboard", *command, "--help"]).stdout
        missing = sorted(f for f in named if f not in help_text)
        assert not missing, f"taskboard {' '.join(command)} takes no {missing}"


def test_the_fence_example_keeps_the_newest_attempt_and_refuses_an_older_one(
    db_url: str,
) -> None:
    """The SQL of "The attempt number is a fencing token", as written; then what its last
    comment says: attempt 2 of the same job, late, fails at the fence."""
    [sql] = [code for _, code in blocks(README, "sql") if "taskboard_fence(" in code]
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(sql)  # no parameters: sent as written, statement by statement
        assert c.execute("SELECT * FROM invoices").fetchall() == [(42, 1999, 3)]
        with pytest.raises(psycopg.Error) as refused:
            c.execute(sql.split("\n\n", 1)[1].replace(", 3)", ", 2)"))
        assert refused.value.sqlstate == "TB409"
        c.execute("ROLLBACK")  # the block's BEGIN left the failed transaction open
        assert c.execute("SELECT * FROM invoices").fetchall() == [(42, 1999, 3)]
