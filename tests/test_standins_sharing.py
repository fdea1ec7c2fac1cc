"""The embedded default shared on one host: every process using one database sends to one
SMTP sink and one Stripe endpoint, registered in `taskboard_standins`, so duplicates and
replays are judged across processes; a process takes over when the registered one exits,
and a database that refuses the registry leaves each process on its own stand-ins.

Each `local_runtime` here plays one process (they share a pid, not an address). Real
aiosmtpd, the real stripe SDK and a real PostgreSQL throughout.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Iterator
from contextlib import AsyncExitStack
from email.message import EmailMessage
from urllib.parse import urlsplit, urlunsplit

import aiosmtplib
import psycopg
import pytest
import stripe
from psycopg import sql
from taskboard.core.base.services import Services, open_stripe_client
from taskboard.core.standins.runtime import Runtime, local_runtime
from taskboard.core.standins.sharing import FORGET_SECONDS

from tests.conftest import wait_for
from tests.drop_proxy import DropProxy

HOST = socket.gethostname()
PARAMS: stripe.PaymentIntentCreateParams = {
    "amount": 1999,
    "currency": "usd",
    "customer": "cus_maya",
    "metadata": {"taskboard_job": "5"},
}


def _message(message_id: str) -> EmailMessage:
    message = EmailMessage()
    message["From"] = "taskboard@example.com"
    message["To"] = "maya@example.com"
    message["Subject"] = "Your receipt"
    message["Message-ID"] = message_id
    message.set_content("Thanks!")
    return message


async def _send(services: Services, message_id: str) -> None:
    assert services.smtp is not None
    await aiosmtplib.send(
        _message(message_id), hostname=services.smtp.host, port=services.smtp.port, timeout=5
    )


async def _create(services: Services, key: str) -> stripe.PaymentIntent:
    async with open_stripe_client(services.stripe) as client:
        return await client.v1.payment_intents.create_async(PARAMS, {"idempotency_key": key})


async def _confirm(services: Services, pid: str, key: str) -> stripe.PaymentIntent:
    async with open_stripe_client(services.stripe) as client:
        return await client.v1.payment_intents.confirm_async(
            pid, {"off_session": True}, {"idempotency_key": key}
        )


def _replayed(intent: stripe.PaymentIntent) -> bool:
    assert intent.last_response is not None
    return intent.last_response.headers.get("idempotent-replayed") == "true"


def _registered(url: str) -> dict[str, tuple[str, int]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT name, address, pid FROM taskboard_standins WHERE host = %s", (HOST,)
        ).fetchall()
    return {name: (address, pid) for name, address, pid in rows}


def _own_addresses(runtime: Runtime) -> dict[str, tuple[str, int]]:
    assert runtime.sink is not None and runtime.stripe is not None
    return {
        "smtp": (f"smtp://127.0.0.1:{runtime.sink.port}", os.getpid()),
        "stripe": (runtime.stripe.base_url, os.getpid()),
    }


def _follows_its_own(runtime: Runtime) -> bool:
    """Whether `runtime` runs both stand-ins and its services point at them."""
    services, sink, endpoint = runtime.current_services(), runtime.sink, runtime.stripe
    return (
        sink is not None
        and endpoint is not None
        and services.smtp is not None
        and services.smtp.port == sink.port
        and services.stripe.api_base == endpoint.base_url
    )


def _standins_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "taskboard.standins" and r.levelno >= logging.WARNING
    ]


async def test_processes_of_one_database_share_one_sink_and_one_endpoint(db_url: str) -> None:
    async with (
        local_runtime({}, database_url=db_url) as first,
        local_runtime({}, database_url=db_url) as second,
    ):
        assert first.sink is not None and first.stripe is not None
        assert (second.sink, second.stripe) == (None, None)
        assert second.services.smtp == first.services.smtp
        assert second.services.stripe.api_base == first.stripe.base_url
        assert _registered(db_url) == _own_addresses(first)

        # One email per process with one Message-ID: one sink sees the duplicate.
        await _send(first.services, "<taskboard-job-5@taskboard.local>")
        await _send(second.current_services(), "<taskboard-job-5@taskboard.local>")
        assert first.sink.count_by_message_id() == {"<taskboard-job-5@taskboard.local>": 2}

        # One idempotency key across processes: the second gets the first's response.
        made = await _create(first.services, "k-shared")
        again = await _create(second.services, "k-shared")
        assert (again.id, _replayed(made), _replayed(again)) == (made.id, False, True)
        await _confirm(second.services, made.id, "k-shared-confirm")
        assert [c.payment_intent for c in first.stripe.charges()] == [made.id]

        seen_by_owner = first.effects()
        assert [(e.message_id, e.count) for e in seen_by_owner.emails] == [
            ("<taskboard-job-5@taskboard.local>", 2)
        ]
        assert seen_by_owner.duplicate_emails == 1
        assert [(c.payment_intent, c.job_id, c.replays) for c in seen_by_owner.charges] == [
            (made.id, 5, 1)
        ]
        assert "shared by the Taskboard processes" in first.email_scope

        # The other process reads the charges over HTTP; the sink's mail it cannot see,
        # and its scope says so instead of showing zero duplicates as a fact.
        seen_by_other = await second.read_effects()
        assert seen_by_other.charges == seen_by_owner.charges
        assert seen_by_other.emails == ()
        assert second.email_scope.startswith("not counted here")
        assert f"process {os.getpid()}" in second.charge_scope
    assert _registered(db_url) == {}


async def test_two_processes_starting_at_once_still_share(db_url: str) -> None:
    ready: list[Runtime] = []
    done = asyncio.Event()

    async def process() -> None:
        async with local_runtime({}, database_url=db_url) as runtime:
            ready.append(runtime)
            await done.wait()

    tasks = [asyncio.create_task(process()) for _ in range(2)]
    try:
        await wait_for(
            lambda: len(ready) == 2 or any(t.done() for t in tasks),
            timeout=15,
            what="both runtimes",
        )
        owners = [r for r in ready if r.sink is not None]
        assert len(owners) == 1
        assert {r.services.smtp for r in ready} == {owners[0].services.smtp}
    finally:
        done.set()
        await asyncio.gather(*tasks)


async def test_the_next_process_takes_over_when_the_owner_exits(db_url: str) -> None:
    async with AsyncExitStack() as owner_process:
        first = await owner_process.enter_async_context(local_runtime({}, database_url=db_url))
        async with local_runtime({}, database_url=db_url, watch_seconds=0.1) as second:
            before = second.current_services()
            assert before.smtp == first.services.smtp and second.sink is None

            await owner_process.aclose()  # the owner exits: it stops and unregisters
            await wait_for(
                lambda: _follows_its_own(second),
                timeout=10,
                what="the second process to send to stand-ins of its own",
            )
            after = second.current_services()
            assert second.sink is not None and second.stripe is not None
            assert after.smtp is not None and after.smtp.port == second.sink.port
            assert after.stripe.api_base == second.stripe.base_url
            assert after.smtp != before.smtp
            assert _registered(db_url) == _own_addresses(second)

            await _send(after, "<after-takeover@test>")
            assert len(second.sink.messages()) == 1
            # A process starting now finds the new owner.
            async with local_runtime({}, database_url=db_url) as third:
                assert third.sink is None and third.services.smtp == after.smtp
        assert _registered(db_url) == {}


async def test_a_registered_stand_in_that_does_not_answer_is_replaced(db_url: str) -> None:
    with socket.socket() as closed:  # a port nothing listens on once this socket closes
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with psycopg.connect(db_url) as conn:
        for name, address in (
            ("smtp", f"smtp://127.0.0.1:{port}"),
            ("stripe", f"http://127.0.0.1:{port}"),
        ):
            conn.execute(
                "INSERT INTO taskboard_standins (name, host, address, pid) VALUES (%s, %s, %s, 1)",
                (name, HOST, address),
            )
    async with local_runtime({}, database_url=db_url) as runtime:
        assert runtime.sink is not None and runtime.stripe is not None
        assert _registered(db_url) == _own_addresses(runtime)


async def test_exit_leaves_a_registration_that_is_no_longer_ours(db_url: str) -> None:
    async with local_runtime({}, database_url=db_url):
        with psycopg.connect(db_url) as conn:  # another process registered since
            conn.execute(
                "UPDATE taskboard_standins SET address = 'smtp://127.0.0.1:1', pid = 1"
                " WHERE name = 'smtp'"
            )
    assert _registered(db_url) == {"smtp": ("smtp://127.0.0.1:1", 1)}


async def test_exit_while_the_database_does_not_answer_waits_one_deadline_not_one_each(
    db_url: str,
) -> None:
    # A worker stopped during an outage (the database frozen) spent FORGET_SECONDS per
    # stand-in on its way out, after its own stop: 10 s of an 18 s SIGTERM.
    async with DropProxy.for_url(db_url) as proxy:
        loop = asyncio.get_running_loop()
        async with AsyncExitStack() as process:
            await process.enter_async_context(
                local_runtime({}, database_url=proxy.url(db_url))
            )
            assert set(_registered(db_url)) == {"smtp", "stripe"}
            proxy.blackhole(True)  # connections accepted, never answered
            started = loop.time()
        took = loop.time() - started
    assert took < FORGET_SECONDS + 2.0, f"exit took {took:.1f} s"
    assert set(_registered(db_url)) == {"smtp", "stripe"}  # left for the next to probe


@pytest.fixture
def unprivileged_url(db_url: str, pg_server_url: str) -> Iterator[str]:
    """`db_url` as a login role with no grant at all (only PUBLIC's CONNECT)."""
    role, password = f"tb_nogrant_{secrets.token_hex(4)}", secrets.token_hex(8)
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
    parts = urlsplit(db_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    try:
        yield urlunsplit(parts._replace(netloc=f"{role}:{password}@{host}"))
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


async def _falls_back_alone(url: str, caplog: pytest.LogCaptureFixture) -> Runtime:
    with caplog.at_level(logging.INFO, logger="taskboard.standins"):
        async with local_runtime({}, database_url=url) as runtime:
            assert runtime.sink is not None and runtime.stripe is not None
            standins = (runtime.smtp_standin, runtime.stripe_standin)
            assert all(t is not None and t.ours and not t.shared for t in standins)
            assert "not shared" in runtime.email_scope
            await _send(runtime.services, "<alone@test>")
            assert len(runtime.sink.messages()) == 1
    return runtime


async def test_a_role_without_privilege_on_the_registry_runs_its_own(
    db_url: str, unprivileged_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await _falls_back_alone(unprivileged_url, caplog)
    [warning] = _standins_warnings(caplog)
    assert "permission denied" in warning
    password = urlsplit(unprivileged_url).password
    assert password is not None and password not in caplog.text
    assert _registered(db_url) == {}


async def test_a_database_without_the_registry_table_runs_its_own(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("DROP TABLE taskboard_standins")
    await _falls_back_alone(db_url, caplog)
    [warning] = _standins_warnings(caplog)
    assert "taskboard_standins" in warning


async def test_configured_services_start_and_register_nothing(db_url: str) -> None:
    env = {
        "TASKBOARD_SMTP_URL": "smtp://maya:hunter2@mail.example.com:587?starttls=1",
        "STRIPE_API_KEY": "sk_test_" + "x" * 24,
    }
    async with local_runtime(env, database_url=db_url) as runtime:
        assert (runtime.sink, runtime.stripe) == (None, None)
        assert (runtime.smtp_standin, runtime.stripe_standin) == (None, None)
        assert runtime.services.smtp is not None
        assert runtime.services.smtp.host == "mail.example.com"
        effects = runtime.effects()
        assert (effects.emails, effects.charges) == ((), ())
        assert runtime.email_scope.startswith("not counted")
        assert "hunter2" not in runtime.describe() + effects.smtp_target
    assert _registered(db_url) == {}
