"""The README's code, run or checked as written: the code blocks are read from README.md
here, so the README and these tests cannot drift apart."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from taskboard.core.engine.settings import DEFAULT_CONCURRENCY

from tests.conftest import _with_dbname
from tests.readme_blocks import README, blocks, section


@pytest.fixture
def empty_db(pg_server_url: str) -> Iterator[str]:
    """A database with nothing in it, not even the schema: a fresh machine's."""
    name = f"readme_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server_url, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_dbname(pg_server_url, name)
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_first_queue_section_runs_as_written_on_a_fresh_database(
    empty_db: str, tmp_path: Path
) -> None:
    text = section("A first queue in five minutes")
    [(at, app)] = blocks(text, "python")
    [filename] = re.findall(r"Save this as `([^`]+)`", text[:at])
    (tmp_path / filename).write_text(app, encoding="utf-8")
    install, run = blocks(text, "sh")
    # The install line is what this test's environment already is (the project installed
    # in .venv); every other line runs as written, in the directory holding the app.
    assert "pip install ." in install[1]
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "TASKBOARD_APP", "PYTHONPATH")}
    env["TASKBOARD_DATABASE_URL"] = empty_db  # in place of the embedded server: a fresh one
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", run[1]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [(_, expected)] = blocks(text, "text")
    assert proc.stdout.splitlines() == expected.splitlines()
    assert '"msg"' in (tmp_path / "worker.log").read_text()  # the worker's JSON log lines

    # The refusal the section quotes, word for word.
    [(payload, message)] = re.findall(r"`--payload '(.+?)'` is refused\s+with `(.+?)`", text)
    bad = subprocess.run(["taskboard", "enqueue", "greet", "--app", "hello:registry",
                          "--payload", payload], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [message], bad.stderr


def test_the_readme_examples_import_only_the_public_api_and_every_name_exists() -> None:
    imported: set[str] = set()
    for _, code in blocks(README, "python"):
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("taskboard") for a in node.names), code
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("taskboard"):
                assert node.module == "taskboard.core", f"{node.module} is not the public API"
                imported.update(a.name for a in node.names)
    assert {"KindRegistry", "JobKind", "JobContext", "Worker", "WorkerSettings", "NewJob",
            "enqueue", "enqueue_many", "ensure_schema", "open_database"} <= imported
    namespace: dict[str, object] = {}
    exec(f"from taskboard.core import {', '.join(sorted(imported))}", namespace)
    import taskboard.core

    assert imported <= set(taskboard.core.__all__)


def test_the_logs_section_runs_as_written_and_its_lines_match(empty_db: str, tmp_path: Path) -> None:
    text = README[README.index("\n### Logs\n"):README.index("\n### Metrics\n")]
    [(_, run)] = blocks(text, "sh")
    [(_, expected)] = blocks(text, "text")
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "TASKBOARD_APP", "PYTHONPATH")}
    env["TASKBOARD_DATABASE_URL"] = empty_db
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", run], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]

    def shape(line: str) -> dict[str, object]:
        # Times differ from run to run; every other field is as the README shows it.
        return {k: v for k, v in json.loads(line).items()
                if k not in ("ts", "seconds", "completed_per_second")}

    # The README shows a host of two or more cores; a one-core host's default is 100.
    expected = expected.replace('"capacity": 200', f'"capacity": {DEFAULT_CONCURRENCY}')
    assert [shape(line) for line in proc.stdout.splitlines()] == [
        shape(line) for line in expected.splitlines()], proc.stdout
