"""The README's Python examples of the application API, run as written against a real
database: each block is read from README.md and executed unchanged. What the README marks
as "your code" (`fetch`, `load_rows`, `upload`, ...) is given here, as an application
would; the blocks themselves are not edited, except that the producer example, which the
README shows as the body of an async function, is run as one.

Not run: the Django view (Django is not a dependency here; what it calls is the sync
`enqueue` on a psycopg connection, tests/test_typed_kinds.py), the list of names
(tests/test_readme.py imports each) and the first queue (run by tests/test_readme.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from taskboard.core import (
    JobContext,
    JobKind,
    KindRegistry,
    NewJob,
    ValidationError,
    enqueue,
    enqueue_many,
    run_jobs,
)

from tests.readme_blocks import README, blocks, example

THUMBNAIL = "async def make_thumbnail"
REPORT = "def build_report"
LEGACY = "def validate_legacy"
OWN_PROGRAM = "async def main() -> None:"
OWN_TESTS = "async def test_thumbnails"
POLICIES = '@registry.kind("email", lease_seconds=20'
SNOOZE = "async def sync_invoice"
STEPS = "async def onboard"
PRODUCER = "producer = KindRegistry()"
RUN_HERE = (THUMBNAIL, REPORT, LEGACY, OWN_PROGRAM, OWN_TESTS, POLICIES, SNOOZE, STEPS, PRODUCER)
RUN_ELSEWHERE = ("from django.db import", "    ConfigError, Database, DatabaseUnavailable",
                 '@registry.kind("greet")')


def run(code: str, namespace: dict[str, Any], marker: str) -> None:
    exec(compile(code, f"README.md, the example with {marker!r}", "exec"), namespace)


def your_code(calls: list[Any]) -> dict[str, Any]:
    """The application's own functions the README's examples call."""

    async def fetch(url: str, width: int, headers: dict[str, str]) -> bytes | None:
        calls.append(("fetch", url, width, headers))
        return None if url.endswith("/missing.png") else b"P" * width

    def load_rows(account: str) -> list[str]:
        calls.append(("load_rows", account))
        return [account, "row"]

    def upload(rows: list[str], headers: dict[str, str]) -> None:
        calls.append(("upload", rows, headers))

    async def handle_legacy(ctx: JobContext) -> None:
        calls.append(("legacy", ctx.payload))

    return {"fetch": fetch, "load_rows": load_rows, "upload": upload,
            "handle_legacy": handle_legacy}


def kinds_section(calls: list[Any]) -> dict[str, Any]:
    namespace = your_code(calls)
    for marker in (THUMBNAIL, REPORT, LEGACY):
        run(example(marker), namespace, marker)
    return namespace


def test_every_python_example_is_run_here_or_named_as_run_elsewhere() -> None:
    """A new example in the README is run by a test, or this fails."""
    for _, code in blocks(README, "python"):
        markers = [m for m in (*RUN_HERE, *RUN_ELSEWHERE) if m in code]
        assert len(markers) == 1, f"an example no test runs (or two markers):\n{code}"


async def test_the_kinds_examples_and_the_test_helper_run_as_written(
    conn: psycopg.AsyncConnection[Any], db_url: str
) -> None:
    calls: list[Any] = []
    namespace = kinds_section(calls)
    registry = namespace["registry"]
    await conn.execute("CREATE TABLE thumbnails (job_id bigint, size int)")

    run(example(OWN_TESTS), namespace, OWN_TESTS)
    await namespace["test_thumbnails"](conn, db_url)  # the README's test, which asserts
    cur = await conn.execute("SELECT job_id, size FROM thumbnails")
    [(job_id, size)] = await cur.fetchall()
    assert size == 128  # the dataclass's default width, filled in at enqueue
    [fetched] = [c for c in calls if c[0] == "fetch"]
    assert fetched[1:3] == ("https://x/a.png", 128)
    assert fetched[3]["X-Taskboard-Job"] == str(job_id)

    # The rest of what the section says of these kinds.
    with pytest.raises(ValidationError, match="width"):
        await enqueue(conn, registry, "thumbnail", {"url": "https://x/b.png", "width": "wide"})
    with pytest.raises(ValidationError, match="ref"):
        await enqueue(conn, registry, "legacy", {"ref": 7})
    await enqueue_many(conn, registry, [
        NewJob("thumbnail", {"url": "https://x/missing.png"}),
        NewJob("report", {"account": "acme"}),
        NewJob("legacy", {"ref": "A-1", "ignored": True}),
    ])
    outcomes = {o.kind: o for o in await run_jobs(db_url, registry)}
    assert outcomes["thumbnail"].state == "dead" and outcomes["thumbnail"].attempts == 1
    assert outcomes["thumbnail"].last_error is not None
    assert "image not found" in outcomes["thumbnail"].last_error
    assert outcomes["report"].state == "completed", outcomes["report"].last_error
    assert outcomes["legacy"].state == "completed", outcomes["legacy"].last_error
    [uploaded] = [c for c in calls if c[0] == "upload"]
    assert uploaded[1] == ["acme", "row"]
    assert uploaded[2]["X-Taskboard-Job"] == str(outcomes["report"].id)
    assert ("legacy", {"ref": "A-1"}) in calls  # the validator's normalised payload


def test_running_a_worker_from_your_own_program_runs_as_written(
    db_url: str, tmp_path: Path
) -> None:
    """The kinds and the program in one file, run as a script: it works off a job."""
    stubs = textwrap.dedent("""
        from taskboard.core import JobContext

        async def fetch(url, width, headers):
            return b"P" * width

        def load_rows(account):
            return [account]

        def upload(rows, headers):
            with open("uploaded.txt", "a") as out:
                out.write(f"{rows[0]} {headers['X-Taskboard-Job']}\\n")

        async def handle_legacy(ctx: JobContext) -> None:
            pass
        """)
    script = "\n".join([stubs, *(example(m) for m in (THUMBNAIL, REPORT, LEGACY, OWN_PROGRAM))])
    (tmp_path / "program.py").write_text(script, encoding="utf-8")
    with psycopg.connect(db_url, autocommit=True) as c:
        job_id = enqueue(c, kinds_section([])["registry"], "report", {"account": "acme"})
    env = {**os.environ, "TASKBOARD_DATABASE_URL": db_url}
    env.pop("DATABASE_URL", None)
    proc = subprocess.Popen([sys.executable, "program.py"], cwd=tmp_path, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        uploaded = tmp_path / "uploaded.txt"
        while not uploaded.exists() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[0]
            time.sleep(0.1)
        assert uploaded.read_text() == f"acme {job_id}\n"
        with psycopg.connect(db_url) as c:
            def completed() -> bool:
                row = c.execute("SELECT completed_at IS NOT NULL FROM taskboard_jobs"
                                " WHERE id = %s", (job_id,)).fetchone()
                c.commit()
                return row == (True,)
            while not completed():
                assert time.monotonic() < deadline, "the job was not completed"
                time.sleep(0.1)
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_the_policies_example_sets_what_it_says() -> None:
    @dataclass
    class Email:
        to: str

    @dataclass
    class Charge:
        amount: int

    namespace: dict[str, Any] = {"registry": KindRegistry(), "Email": Email, "Charge": Charge}
    run(example(POLICIES), namespace, POLICIES)
    email = namespace["registry"].get("email")
    assert (email.lease_seconds, email.max_attempts, email.retry_base_seconds,
            email.retry_max_seconds, email.rate_per_second) == (20, 8, 5, 300, 14)
    charge = namespace["registry"].get("charge")
    assert (charge.lease_seconds, charge.max_running) == (120, 10)


async def test_the_snooze_example_puts_its_job_back_without_using_an_attempt(
    conn: psycopg.AsyncConnection[Any], db_url: str
) -> None:
    async def partner_api_is_up() -> bool:
        return False

    namespace: dict[str, Any] = {"JobContext": JobContext,
                                 "partner_api_is_up": partner_api_is_up}
    run(example(SNOOZE), namespace, SNOOZE)
    registry = KindRegistry()
    registry.kind("sync-invoice")(namespace["sync_invoice"])
    job_id = await enqueue(conn, registry, "sync-invoice", {})
    [outcome] = await run_jobs(db_url, registry)
    assert outcome.state == "pending", outcome
    cur = await conn.execute(
        "SELECT run_at - now() > interval '290 seconds', max_attempts,"
        " (SELECT array_agg(outcome) FROM taskboard_attempts WHERE job_id = j.id)"
        " FROM taskboard_jobs j WHERE id = %s", (job_id,))
    later, _max_attempts, history = await cur.fetchone() or (None, None, None)
    assert later is True and history == ["snoozed"]


async def test_the_steps_example_resumes_after_its_last_recorded_step(
    conn: psycopg.AsyncConnection[Any], db_url: str
) -> None:
    calls: list[str] = []

    def create_account(email: str) -> dict[str, Any]:  # a plain function: in a thread
        calls.append(f"create {email}")
        return {"id": "acct_1"}

    async def send_welcome(account_id: str) -> None:
        calls.append(f"welcome {account_id}")

    async def send_tips(account_id: str) -> None:
        calls.append(f"tips {account_id}")

    namespace: dict[str, Any] = {"JobContext": JobContext, "create_account": create_account,
                                 "send_welcome": send_welcome, "send_tips": send_tips}
    run(example(STEPS), namespace, STEPS)
    registry = KindRegistry()
    registry.register(JobKind("onboard", lambda payload: payload, namespace["onboard"]))
    job_id = await enqueue(conn, registry, "onboard", {"email": "maya@example.com"})

    [first] = await run_jobs(db_url, registry)
    assert first.state == "pending" and calls == ["create maya@example.com", "welcome acct_1"]
    # Three days later (the test moves the recorded wake-up time, not the clock).
    await conn.execute(
        "UPDATE taskboard_steps SET result = to_jsonb(extract(epoch FROM now()) - 1)"
        " WHERE job_id = %s AND name = 'taskboard.sleep#0'", (job_id,))
    await conn.execute("UPDATE taskboard_jobs SET run_at = now() WHERE id = %s", (job_id,))
    [second] = await run_jobs(db_url, registry)
    assert second.state == "completed", second.last_error
    assert calls == ["create maya@example.com", "welcome acct_1", "tips acct_1"]
    cur = await conn.execute("SELECT result FROM taskboard_jobs WHERE id = %s", (job_id,))
    assert await cur.fetchone() == ({"account": "acct_1"},)


async def test_the_producer_example_enqueues_inside_the_application_s_transaction(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    def validate_thumbnail(payload: Any) -> dict[str, Any]:
        if not isinstance(payload.get("url"), str):
            raise ValidationError("must be a string", field="url")
        return {"url": payload["url"]}

    await conn.execute("CREATE TABLE uploads (url text)")
    namespace: dict[str, Any] = {"validate_thumbnail": validate_thumbnail}
    body = example(PRODUCER)
    run("async def readme_example(conn, url, urls):\n" + textwrap.indent(body, "    ")
        + "    return ids\n", namespace, PRODUCER)
    urls = ["https://x/1.png", "https://x/2.png"]
    ids = await namespace["readme_example"](conn, "https://x/0.png", urls)
    assert len(ids) == 2
    cur = await conn.execute("SELECT url FROM uploads")
    assert await cur.fetchall() == [("https://x/0.png",)]
    cur = await conn.execute("SELECT payload->>'url' FROM taskboard_jobs WHERE kind ="
                             " 'thumbnail' ORDER BY id")
    assert [r[0] for r in await cur.fetchall()] == ["https://x/0.png", *urls]
