"""`--app MODULE:ATTR`: the application's own kinds in `taskboard enqueue`, `worker`,
`schedule add` and `advise`, run as users run them (the installed `taskboard` script, from
the application's directory, in real processes against a real PostgreSQL)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.test_cli import assert_one_line_error

ROOT = Path(__file__).resolve().parent.parent
# The console script, not `python -m`: -m would put the current directory on the path
# itself and hide whether `--app` finds the application's module there.
TASKBOARD = str(Path(sys.executable).with_name("taskboard"))
APP = "tests.apps.shapes:registry"


def taskboard(
    url: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items()
            if k not in ("TASKBOARD_DATABASE_URL", "DATABASE_URL", "TASKBOARD_APP")}
    full["TASKBOARD_DATABASE_URL"] = url
    full.update(env or {})
    return subprocess.run([TASKBOARD, *args], capture_output=True, text=True, env=full,
                          timeout=timeout, cwd=ROOT, stdin=subprocess.DEVNULL)


def jobs(url: str) -> list[tuple[int, str, int, bool]]:
    with psycopg.connect(url) as c:
        return [(r[0], r[1], r[2], r[3]) for r in c.execute(
            "SELECT id, kind, attempts, completed_at IS NOT NULL FROM taskboard_jobs ORDER BY id"
        ).fetchall()]


def test_the_worker_runs_the_apps_async_and_sync_kinds_each_exactly_once(
    db_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "shapes.log"
    for kind, payload in (("square", '{"side": 3}'), ("cube", '{"side": 2}'),
                          ("noop", "{}")):  # the built-in kinds stay beside the app's
        proc = taskboard(db_url, "enqueue", "--app", APP, kind, "--payload", payload)
        assert proc.returncode == 0, proc.stderr
    proc = taskboard(db_url, "worker", "--app", APP, "--burst", "--lease", "5",
                     env={"SHAPES_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(log.read_text().splitlines()) == ["cube 2 8", "square 1 square 9"]
    assert [(kind, attempts, done) for _, kind, attempts, done in jobs(db_url)] == [
        ("square", 1, True), ("cube", 1, True), ("noop", 1, True)]


def test_enqueue_with_the_app_validates_its_payloads_in_one_line(db_url: str) -> None:
    ok = taskboard(db_url, "enqueue", "--app", APP, "square", "--payload", '{"side": 4}')
    assert ok.returncode == 0 and ok.stdout.strip().isdigit(), ok.stderr
    bad = taskboard(db_url, "enqueue", "--app", APP, "square", "--payload", '{"side": "4"}')
    assert_one_line_error(bad, "side", "must be an integer, got string")
    missing = taskboard(db_url, "enqueue", "--app", APP, "square", "--payload", "{}")
    assert_one_line_error(missing, "side: is required")
    unknown = taskboard(db_url, "enqueue", "--app", APP, "square",
                        "--payload", '{"side": 1, "colour": "red"}')
    assert_one_line_error(unknown, "colour")
    # Without the app, its kind is unknown (the built-in kinds are all there is).
    alone = taskboard(db_url, "enqueue", "square", "--payload", '{"side": 4}')
    assert_one_line_error(alone, "unknown job kind 'square'")
    assert [kind for _, kind, _, _ in jobs(db_url)] == ["square"]


def test_taskboard_app_names_the_app_when_the_flag_does_not(db_url: str) -> None:
    proc = taskboard(db_url, "enqueue", "cube", "--payload", '{"side": 2}',
                     env={"TASKBOARD_APP": "tests.apps.shapes:make_registry"})
    assert proc.returncode == 0, proc.stderr
    only = taskboard(db_url, "enqueue", "--app", "tests.apps.shapes:only_mine", "noop")
    assert_one_line_error(only, "unknown job kind 'noop'", "known: square")


@pytest.mark.parametrize(
    ("spec", "needles"),
    [
        ("tests.apps.shapes", ["must be MODULE:ATTR"]),
        ("tests.apps.nowhere:registry", ["no module named 'tests.apps.nowhere'"]),
        ("tests.apps.broken:registry", ["failed to import", "SHAPES_API_KEY is not set"]),
        ("tests.apps.shapes:nothing", ["has no attribute 'nothing'"]),
        ("tests.apps.shapes:not_a_registry", ["is a int, not a KindRegistry"]),
    ],
)
def test_a_bad_app_is_one_line_and_exit_2_before_anything_is_written(
    db_url: str, spec: str, needles: list[str]
) -> None:
    for args in (["enqueue", "noop"], ["worker", "--burst"],
                 ["schedule", "add", "n", "--cron", "* * * * *", "noop"], ["advise"]):
        proc = taskboard(db_url, *args, "--app", spec)
        assert_one_line_error(proc, *needles)
    assert jobs(db_url) == []


def test_schedule_add_and_advise_know_the_apps_kinds(db_url: str) -> None:
    proc = taskboard(db_url, "schedule", "add", "squares", "--cron", "0 * * * *", "square",
                     "--payload", '{"side": 2}', "--app", APP)
    assert proc.returncode == 0 and "square every" in proc.stdout, proc.stderr
    bad = taskboard(db_url, "schedule", "add", "squares", "--cron", "0 * * * *", "square",
                    "--payload", '{"side": true}', "--app", APP)
    assert_one_line_error(bad, "side")
    taskboard(db_url, "enqueue", "--app", APP, "square", "--payload", '{"side": 1}')
    assert taskboard(db_url, "worker", "--app", APP, "--burst").returncode == 0
    advice = taskboard(db_url, "advise", "--app", APP)
    assert advice.returncode == 0, advice.stderr
    assert advice.stdout.splitlines()[1].startswith("square")
    assert "no timings yet for: billing, cube, email, noop, sleep" in advice.stdout
