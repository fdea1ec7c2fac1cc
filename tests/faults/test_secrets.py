"""Known secrets in, searched for in every output: worker logs, CLI output and errors,
unreachable-database errors, stored job errors, service descriptions, the dashboard.

The secrets: a database role's password (in the URL; the embedded server trusts its unix
socket, so the password is never checked, but it is in the URL and must be masked all the
same), an SMTP password (the sink demands AUTH), and a Stripe key (sent to the local
endpoint).
"""

from __future__ import annotations

import asyncio
import html
import os
import re
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql
from taskboard.core.base.services import services_from_env
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.fleet import Fleet
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue_many
from taskboard.core.runtime.db import Database
from taskboard.core.standins.runtime import local_runtime
from taskboard.core.standins.smtp_sink import SmtpSink
from taskboard.core.standins.stripe_endpoint import StripeEndpoint

from tests.conftest import wait_for
from tests.faults.harness import SCRUBBED_ENV, spawn_worker, terminate_backends

CLI = [sys.executable, "-m", "taskboard.core.cli"]
TAG = secrets.token_hex(6)
DB_PASSWORD = f"dbpw{TAG}Secret"
SMTP_PASSWORD = f"smtppw{TAG}Secret"
STRIPE_KEY = f"sk_test_{TAG}StripeSecret"
SECRETS = {"database password": DB_PASSWORD, "SMTP password": SMTP_PASSWORD,
           "Stripe key": STRIPE_KEY}
# Pieces that would betray a partial leak (a key with its prefix cut off, say).
FRAGMENTS = {f"{name} (fragment)": value[-12:] for name, value in SECRETS.items()}

EMAIL = {"to": ["maya@example.com"], "subject": "Receipt", "text": "Thanks."}
BILL = {"customer": "cus_maya", "amount": 1999, "currency": "usd"}


def assert_no_secret(where: str, text: str) -> None:
    """Fail naming `where` and the secret if any secret (or a piece of one) is in `text`."""
    for name, value in {**SECRETS, **FRAGMENTS}.items():
        assert value not in text, f"{name} leaked in {where}: ...{_around(text, value)}..."


def _around(text: str, value: str) -> str:
    at = text.find(value)
    return text[max(0, at - 80): at + len(value) + 40]


def _with_credentials(url: str, user: str, password: str, *, netloc_host: str = "") -> str:
    parts = urlsplit(url)
    host = netloc_host or parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


@pytest.fixture
def secret_url(db_url: str, pg_server_url: str) -> Iterator[str]:
    """`db_url` as a role that has a password and owns Taskboard's tables."""
    role = f"tb_secret_{TAG}"
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(DB_PASSWORD)))
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT ALL ON SCHEMA public TO {}").format(sql.Identifier(role)))
        tables = [row[0] for row in conn.execute(
            "SELECT tablename FROM pg_tables"
            " WHERE schemaname = 'public' AND tablename LIKE 'taskboard%'").fetchall()]
        assert "taskboard_jobs" in tables
        for table in tables:
            conn.execute(sql.SQL("ALTER TABLE {} OWNER TO {}").format(
                sql.Identifier(table), sql.Identifier(role)))
    try:
        yield _with_credentials(db_url, role, DB_PASSWORD)
    finally:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(sql.SQL("REASSIGN OWNED BY {} TO CURRENT_USER").format(
                sql.Identifier(role)))
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        with psycopg.connect(pg_server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture
async def services() -> AsyncIterator[tuple[SmtpSink, StripeEndpoint]]:
    async with SmtpSink(username="mailer", password=SMTP_PASSWORD) as sink, \
            StripeEndpoint() as stripe:
        yield sink, stripe


def _service_env(sink: SmtpSink, stripe: StripeEndpoint) -> dict[str, str]:
    return {
        "TASKBOARD_SMTP_URL": f"smtp://mailer:{SMTP_PASSWORD}@{sink.host}:{sink.port}",
        "STRIPE_API_KEY": STRIPE_KEY,
        "TASKBOARD_STRIPE_API_BASE": stripe.base_url,
    }


async def run_cli(url: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run `taskboard`; returns `[exit N]`, stdout and stderr as one text."""
    full = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    full["TASKBOARD_DATABASE_URL"] = url
    full.update(env or {})
    proc = await asyncio.create_subprocess_exec(
        *CLI, *args, env=full, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return f"[exit {proc.returncode}]\n{out.decode()}{err.decode()}"


async def run_all(calls: dict[str, tuple[str, list[str], dict[str, str]]]) -> dict[str, str]:
    """Several CLI runs at once (each is mostly interpreter start-up)."""
    texts = await asyncio.gather(*(run_cli(url, *args, env=env) for url, args, env in
                                   calls.values()))
    return dict(zip(calls, texts, strict=True))


async def _job_ids(url: str) -> list[tuple[int, bool, bool]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT id, completed_at IS NOT NULL, failed_at IS NOT NULL FROM taskboard_jobs"
        )
        return [tuple(r) for r in await cur.fetchall()]  # type: ignore[misc]


async def test_secrets_never_reach_logs_errors_or_cli_output(
    secret_url: str, services: tuple[SmtpSink, StripeEndpoint], tmp_path: Path
) -> None:
    sink, stripe = services
    env = _service_env(sink, stripe)
    outputs: dict[str, str] = {}

    # Enqueue as the role with a password: through the CLI, good and bad, and in bulk.
    outputs.update(await run_all({
        "enqueue bad": (secret_url, ["enqueue", "email", "--payload", "{}"], env),
    }))
    assert "[exit 2]" in outputs["enqueue bad"]
    async with await psycopg.AsyncConnection.connect(secret_url, autocommit=True) as conn:
        await enqueue_many(conn, builtin_registry(), [
            NewJob("email", EMAIL), NewJob("billing", BILL), NewJob("email", EMAIL),
            NewJob("billing", {**BILL, "customer": "cus_other"}), NewJob("noop", {}),
        ])

    # Failures whose messages come from the services themselves.
    sink.fail_next(1, code=451, message="4.3.0 Try again later")
    stripe.inject("500")
    stripe.inject("decline")
    log = tmp_path / "worker.log"
    proc = spawn_worker(secret_url, "sw", log, lease=2.0, pool_size=5, poll=0.5, env=env)
    try:
        async def all_settled() -> bool:
            rows = await _job_ids(secret_url)
            return len(rows) == 5 and all(done or dead for _, done, dead in rows)

        await wait_for(all_settled, timeout=40, what="the jobs to settle")
        # A cut connection: the reconnect path logs too.
        async with await psycopg.AsyncConnection.connect(secret_url, autocommit=True) as conn:
            await terminate_backends(conn, "sw")
        outputs.update(await run_all({
            "status": (secret_url, ["status"], env),
            "history": (secret_url, ["history", "1"], env),
        }))
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 30)
    outputs["worker log"] = log.read_text()
    assert len(sink.messages()) >= 2 and len(stripe.charges()) >= 1  # it really did work

    # Every error the jobs stored, and the history's.
    async with await psycopg.AsyncConnection.connect(secret_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT coalesce(string_agg(last_error, ' | '), '') FROM taskboard_jobs"
        )
        row = await cur.fetchone()
        outputs["last_error"] = row[0] if row else ""
        cur = await conn.execute(
            "SELECT coalesce(string_agg(error, ' | '), '') FROM taskboard_attempts"
        )
        row = await cur.fetchone()
        outputs["attempt errors"] = row[0] if row else ""
    assert "declined" in outputs["last_error"]

    # The database unreachable (same credentials, nowhere to go), and bad service settings.
    gone = _with_credentials(secret_url, f"tb_secret_{TAG}", DB_PASSWORD,
                             netloc_host="127.0.0.1:1")
    bad_smtp = {**env, "TASKBOARD_SMTP_URL": f"smtp://mailer:{SMTP_PASSWORD}@host:notaport"}
    bad_key = {**env, "STRIPE_API_KEY": STRIPE_KEY + "!"}
    outputs.update(await run_all({
        "unreachable status": (gone, ["status"], env),
        # A worker waits a lease for its database, each retry a log line: 2 s here.
        "unreachable worker": (gone, ["worker", "--id", "x", "--lease", "2"], env),
        "bad SMTP URL": (secret_url, ["worker", "--id", "y"], bad_smtp),
        "bad Stripe key": (secret_url, ["worker", "--id", "z"], bad_key),
    }))
    outputs["describe"] = services_from_env(env).describe() + repr(services_from_env(env))

    for where, text in outputs.items():
        assert_no_secret(where, text)
    # ...and the outputs really were about those credentials, masked.
    assert f"tb_secret_{TAG}:***@" in outputs["status"]
    assert "mailer:***@" in outputs["worker log"]
    assert "sk_test_" in outputs["describe"] and "(masked)" in outputs["describe"]
    for where in ("unreachable status", "bad SMTP URL", "bad Stripe key"):
        assert "[exit 2]" in outputs[where], outputs[where]
    assert "[exit 5]" in outputs["unreachable worker"], outputs["unreachable worker"]
    assert "cannot start yet" in outputs["unreachable worker"], outputs["unreachable worker"]
    assert f"tb_secret_{TAG}:***@" in outputs["unreachable worker"]


def _screen_text(svg: str) -> str:
    """The characters on an exported screen, in order, without the SVG around them."""
    return html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")


async def test_secrets_never_reach_the_dashboard(
    secret_url: str, services: tuple[SmtpSink, StripeEndpoint], db_url: str
) -> None:
    from taskboard.tui.app import TaskboardApp

    sink, stripe = services
    env = _service_env(sink, stripe)
    seen: dict[str, str] = {}
    async with local_runtime(env) as runtime:
        fleet = Fleet(Database(secret_url), runtime, builtin_registry(),
                      settings=WorkerSettings(lease_seconds=5, pool_size=4, drain_seconds=1))
        await fleet.start(1)
        try:
            await fleet.enqueue_sample("email")
            await fleet.enqueue_sample("billing")
            snapshot = await fleet.refresh()
            seen["snapshot.database"] = snapshot.database
            seen["snapshot.effects"] = repr(snapshot.effects)
            seen["runtime.describe"] = runtime.describe()
            assert "***" in snapshot.database and "(masked)" in snapshot.effects.stripe_target

            app = TaskboardApp(fleet, live=False)
            async with app.run_test(size=(180, 60)) as pilot:
                await _drawn(pilot, app)
                seen["main screen"] = _screen_text(app.export_screenshot())
                await pilot.press("question_mark")
                await pilot.pause()
                seen["help screen"] = _screen_text(app.export_screenshot())
                await pilot.press("escape")
                await pilot.pause()
                # The database goes away: the banner shows why, without the password.
                await _block_connections(db_url, True)
                try:
                    app.request_refresh()
                    await _drawn(pilot, app, connected=False)
                    seen["outage screen"] = _screen_text(app.export_screenshot())
                    seen["outage error"] = str(app.snapshot.error if app.snapshot else "")
                finally:
                    await _block_connections(db_url, False)
        finally:
            await fleet.close()
    assert f"tb_secret_{TAG}" in seen["main screen"]  # the screen did show the database
    assert seen["outage error"]
    for where, text in seen.items():
        assert_no_secret(where, text)


async def _drawn(pilot: Any, app: Any, *, connected: bool = True) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while True:
        await pilot.pause()
        snap = app.snapshot
        if snap is not None and snap.connected == connected and not app.refreshing:
            await pilot.pause()
            return
        assert loop.time() < deadline, "the dashboard did not draw a snapshot"
        await asyncio.sleep(0.05)


async def _block_connections(db_url: str, block: bool) -> None:
    """Refuse (or allow again) new connections to the test database, and cut the open ones."""
    parts = urlsplit(db_url)
    name = parts.path.lstrip("/")
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as admin:
        await admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
            sql.Identifier(name), sql.SQL("false" if block else "true")))
        if block:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
