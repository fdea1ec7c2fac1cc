"""The email and billing handlers against real services on loopback and a real PostgreSQL.

A small stand-in for the worker's `JobContext` runs one attempt at a time, so the article's
timeline can be played directly: worker A stalls after its external effect, worker B
reclaims and runs the job again, A's completion is rejected (its transaction rolls back).
The mail goes out twice with one `Message-ID`; the card is charged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import secrets
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
import pytest_asyncio
from aiohttp import web
from psycopg import sql
from psycopg.types.json import Jsonb
from taskboard.core import sql as tb_sql
from taskboard.core.base.errors import LeaseLost, PermanentJobError
from taskboard.core.base.services import Services, SmtpSettings, StripeSettings
from taskboard.core.kinds import JsonObject
from taskboard.core.kinds.billing import charge, validate_billing_payload
from taskboard.core.kinds.email import send_email, validate_email_payload
from taskboard.core.kinds.registry import ChargeEffect, EffectRecord, EffectTicket, SendEffect
from taskboard.core.standins.smtp_sink import SmtpSink
from taskboard.core.standins.stripe_endpoint import StripeEndpoint

SECRET_KEY = "sk_test_51TaskboardSECRETkeyDoNotLeak"
INSTALLATION = "11111111-2222-3333-4444-555555555555"


@dataclass
class Attempt:
    """One attempt of one job, as the worker would hand it to a handler (a `JobContext`)."""

    job_id: int
    kind: str
    payload: JsonObject
    services: Services
    conn: Any = None
    attempt: int = 1
    lease_lost_at: int | None = None  # the checkpoint where the lease turns out lost
    on_checkpoint: Callable[[int], None] | None = None
    checkpoints: int = 0
    notes: list[str] = field(default_factory=list)
    installation_id: str = INSTALLATION
    external_calls: list[str] = field(default_factory=list)
    identity: str = ""  # a job from before migration 9: keyed by its id
    recorded: list[EffectRecord] = field(default_factory=list)
    # Durable steps recorded so far; pass one attempt's to the next to play a reclaim that
    # finds them (a fresh dict: the steps were in flight, nothing recorded).
    steps: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.identity = self.identity or str(self.job_id)

    async def _record(self, ticket: EffectTicket, effect: EffectRecord) -> None:
        # The worker writes these on its own (EffectLog); here the test reads them back.
        self.recorded.append(effect)

    async def checkpoint(self) -> None:
        self.checkpoints += 1
        if self.on_checkpoint is not None:
            self.on_checkpoint(self.checkpoints)
        if self.checkpoints == self.lease_lost_at:
            raise LeaseLost(f"job {self.job_id}: lease lost")

    @contextlib.asynccontextmanager
    async def external(self, what: str) -> AsyncIterator[EffectTicket]:
        # As the worker's context does: the start of an external call is a checkpoint.
        await self.checkpoint()
        self.external_calls.append(what)
        yield EffectTicket(
            self.job_id, self.attempt, time.time() + 60, self.identity, "w", self._record
        )

    async def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # The worker's records are fenced in the database (tests/test_steps.py); here the
        # handler's use of them: a recorded step is replayed, not run.
        if name not in self.steps:
            value = fn(*args, **kwargs)
            self.steps[name] = json.loads(json.dumps(await value if inspect.isawaitable(value)
                                                     else value))
        return self.steps[name]

    def hold_completion(self, seconds: float) -> None:
        pass

    def note(self, message: str) -> None:
        self.notes.append(message)


# -- fixtures ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def database_url(pg_server_url: str, template_db: str) -> Iterator[str]:
    """One database with Taskboard's real schema for this module (conftest's server)."""
    name = f"handlers_test_{secrets.token_hex(4)}"
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template_db)
            )
        )
    try:
        yield psycopg.conninfo.make_conninfo(pg_server_url, dbname=name)
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest_asyncio.fixture(scope="module")
async def pg(database_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection outside autocommit: each attempt runs in its own transaction, as in
    the worker, where the handler's writes commit with the fenced completion."""
    async with await psycopg.AsyncConnection.connect(database_url) as connection:
        yield connection


@pytest.fixture
def services(sink: SmtpSink, endpoint: StripeEndpoint) -> Services:
    # A secret-looking key: the local endpoint accepts any, and every failure test checks
    # that it never leaks into what the worker would store as last_error.
    stripe_settings = StripeSettings(api_key=SECRET_KEY, api_base=endpoint.base_url)
    return Services(smtp=sink.settings(), stripe=stripe_settings)


async def _new_job(conn: psycopg.AsyncConnection[Any]) -> int:
    async with conn.transaction():
        cursor = await conn.execute(
            "INSERT INTO taskboard_jobs (kind, payload) VALUES ('billing', %s) RETURNING id",
            (Jsonb(BILL),),
        )
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def _recorded(conn: psycopg.AsyncConnection[Any], job_id: int) -> list[tuple[Any, ...]]:
    async with conn.transaction():
        cursor = await conn.execute(
            "SELECT payment_intent_id, amount, currency, customer"
            " FROM taskboard_billing_charges WHERE job_id = %s",
            (job_id,),
        )
        return await cursor.fetchall()


def _assert_no_secret(exc: BaseException) -> None:
    shown = "".join(traceback.format_exception(exc)) + repr(exc) + str(exc)
    assert SECRET_KEY not in shown
    assert "SECRETkey" not in shown


# -- email ---------------------------------------------------------------------------

EMAIL = validate_email_payload(
    {"to": "Maya <maya@example.com>", "subject": "Your receipt", "text": "Thanks, Maya."}
)


def _email(services: Services, job_id: int, **kwargs: Any) -> Attempt:
    return Attempt(job_id=job_id, kind="email", payload=EMAIL, services=services, **kwargs)


async def test_every_attempt_of_a_job_carries_the_same_message_id(
    sink: SmtpSink, services: Services
) -> None:
    await send_email(_email(services, 101, attempt=1))
    await send_email(_email(services, 101, attempt=2))
    await send_email(_email(services, 102))

    first, second, other = sink.messages()
    assert first.message_id == second.message_id == "<taskboard-job-101@taskboard.local>"
    assert other.message_id == "<taskboard-job-102@taskboard.local>"
    assert [m.header("X-Taskboard-Job") for m in (first, second)] == ["101", "101"]
    assert [m.header("X-Taskboard-Attempt") for m in (first, second)] == ["1", "2"]
    assert first.recipients == ("maya@example.com",)
    assert first.subject == "Your receipt"
    assert sink.count_by_message_id()["<taskboard-job-101@taskboard.local>"] == 2


async def test_a_job_with_an_identity_keys_its_message_and_records_each_accepted_copy(
    sink: SmtpSink, services: Services
) -> None:
    identity = "6f1c2a0e-0000-4000-8000-000000000001"
    attempt = _email(services, 101, identity=identity, attempt=3)
    await send_email(attempt)
    [message] = sink.messages()
    assert message.message_id == f"<taskboard-job-{identity}@taskboard.local>"
    assert attempt.recorded == [SendEffect(str(message.message_id), ("maya@example.com",))]


async def test_mail_is_sent_only_inside_one_checked_external_call(
    sink: SmtpSink, services: Services
) -> None:
    seen_at_checkpoint: list[int] = []
    attempt = _email(
        services, 103, on_checkpoint=lambda n: seen_at_checkpoint.append(len(sink.messages()))
    )
    await send_email(attempt)
    # Checked once, before the send; nothing after it (completing beats re-sending).
    assert seen_at_checkpoint == [0] and attempt.external_calls == ["smtp send"]
    assert attempt.notes[0].startswith("sent <taskboard-job-103@taskboard.local> to 1 recipient")
    [message] = sink.messages()
    assert message.header("X-Taskboard-Attempt") == "1"
    assert float(message.header("X-Taskboard-Deadline") or 0) > time.time()


async def test_lease_lost_before_the_send_sends_nothing(sink: SmtpSink, services: Services) -> None:
    with pytest.raises(LeaseLost):
        await send_email(_email(services, 104, lease_lost_at=1))
    assert sink.messages() == ()


async def test_stale_worker_that_resumes_after_sending_leaves_a_duplicate_with_one_id(
    sink: SmtpSink, services: Services
) -> None:
    # Worker A sends, then stalls before completing; its completion will be fenced.
    await send_email(_email(services, 105, attempt=1))
    # Worker B reclaims the job and sends again: the fence could not retract A's send.
    await send_email(_email(services, 105, attempt=2))
    assert sink.count_by_message_id() == {"<taskboard-job-105@taskboard.local>": 2}
    [row] = sink.effects_emails()
    assert row.count == 2


async def test_temporary_smtp_rejection_is_retryable_with_the_reply(
    sink: SmtpSink, services: Services
) -> None:
    sink.fail_next(1, code=451, message="4.7.1 Greylisted, try again later")
    with pytest.raises(Exception) as caught:
        await send_email(_email(services, 106))
    assert not isinstance(caught.value, PermanentJobError)
    assert "451 4.7.1 Greylisted" in str(caught.value)


async def test_permanent_smtp_rejection_kills_the_job_with_the_reply(
    sink: SmtpSink, services: Services
) -> None:
    sink.fail_next(1, code=550, message="5.1.1 Mailbox unavailable")
    with pytest.raises(PermanentJobError, match=r"550 5\.1\.1 Mailbox unavailable"):
        await send_email(_email(services, 107))
    assert sink.messages() == ()


async def test_unreachable_smtp_server_is_retryable(sink: SmtpSink, services: Services) -> None:
    sink.down = True
    with pytest.raises(ConnectionError, match="unreachable"):
        await send_email(_email(services, 108))


async def test_smtp_login_uses_the_settings_and_never_shows_the_password() -> None:
    async with SmtpSink(username="maya", password="hunter2") as sink:
        good = Services(smtp=sink.settings())
        await send_email(_email(good, 109))
        assert len(sink.messages()) == 1

        wrong = SmtpSettings(sink.host, sink.port, username="maya", password="hunter3")
        with pytest.raises(PermanentJobError) as caught:
            await send_email(_email(Services(smtp=wrong), 110))
        assert "535" in str(caught.value)
        assert "hunter3" not in "".join(traceback.format_exception(caught.value))


async def test_html_body_goes_out_as_an_alternative(sink: SmtpSink, services: Services) -> None:
    payload = validate_email_payload({**EMAIL, "html": "<p>Thanks, Maya.</p>"})
    await send_email(Attempt(job_id=111, kind="email", payload=payload, services=services))
    [message] = sink.messages()
    assert (message.header("Content-Type") or "").startswith("multipart/alternative")


async def test_email_without_smtp_settings_is_retryable_and_says_what_to_set() -> None:
    with pytest.raises(RuntimeError, match="TASKBOARD_SMTP_URL"):
        await send_email(_email(Services(), 112))


# -- billing -------------------------------------------------------------------------

BILL = validate_billing_payload(
    {"customer": "cus_maya", "amount": 1999, "currency": "EUR", "description": "March"}
)


def _bill(services: Services, job_id: int, conn: Any, **kwargs: Any) -> Attempt:
    return Attempt(
        job_id=job_id, kind="billing", payload=BILL, services=services, conn=conn, **kwargs
    )


async def test_charge_is_made_and_recorded_as_its_own_effect(
    pg: psycopg.AsyncConnection[Any], endpoint: StripeEndpoint, services: Services
) -> None:
    job_id = await _new_job(pg)
    attempt = _bill(services, job_id, pg)
    async with pg.transaction():
        await charge(attempt)

    [made] = endpoint.charges()
    assert (made.amount, made.currency, made.customer, made.job_id) == (
        1999,
        "eur",
        "cus_maya",
        job_id,
    )
    assert made.idempotency_key == f"taskboard-{INSTALLATION}-job-{job_id}-create"
    assert made.confirm_key == f"taskboard-{INSTALLATION}-job-{job_id}-confirm"
    # Recorded through the ticket (the worker commits it on its own), not in the transaction.
    assert attempt.recorded == [
        ChargeEffect(made.payment_intent, 1999, "eur", "cus_maya", "succeeded")
    ]
    assert await _recorded(pg, job_id) == []
    assert attempt.notes == [f"charged 1999 eur to cus_maya: {made.payment_intent}"]
    assert attempt.external_calls == ["stripe create", "stripe confirm"]


async def test_stale_worker_and_reclaimer_charge_the_card_once(
    pg: psycopg.AsyncConnection[Any], endpoint: StripeEndpoint, services: Services
) -> None:
    job_id = await _new_job(pg)
    # Worker A charges, but its fenced completion is rejected: its transaction rolls back,
    # and the record of the charge, made on its own, stays.
    first = _bill(services, job_id, pg, attempt=1)
    async with pg.transaction(force_rollback=True):
        await charge(first)
    # Worker B, which reclaimed the job, runs it again and commits.
    second = _bill(services, job_id, pg, attempt=2)
    async with pg.transaction():
        await charge(second)

    [made] = endpoint.charges()
    assert made.replays == 2  # create and confirm both replayed for B
    assert second.notes == [f"charge replayed by Stripe: {made.payment_intent} (1999 eur)"]
    effect = ChargeEffect(made.payment_intent, 1999, "eur", "cus_maya", "succeeded")
    assert first.recorded == second.recorded == [effect]


async def test_lease_lost_between_create_and_confirm_charges_nothing_until_the_rerun(
    pg: psycopg.AsyncConnection[Any], endpoint: StripeEndpoint, services: Services
) -> None:
    job_id = await _new_job(pg)
    with pytest.raises(LeaseLost):
        async with pg.transaction():
            await charge(_bill(services, job_id, pg, lease_lost_at=2))
    assert endpoint.charges() == ()
    async with pg.transaction():
        await charge(_bill(services, job_id, pg, attempt=2))
    [made] = endpoint.charges()
    assert made.idempotency_key == f"taskboard-{INSTALLATION}-job-{job_id}-create"
    assert len({r.path for r in endpoint.requests() if r.path.endswith("/confirm")}) == 1


async def test_declined_card_kills_the_job_with_the_decline_code(
    pg: psycopg.AsyncConnection[Any], endpoint: StripeEndpoint, services: Services
) -> None:
    job_id = await _new_job(pg)
    endpoint.inject("decline", decline_code="insufficient_funds")
    with pytest.raises(PermanentJobError, match="insufficient_funds") as caught:
        async with pg.transaction():
            await charge(_bill(services, job_id, pg))
    _assert_no_secret(caught.value)
    assert endpoint.charges() == ()
    assert await _recorded(pg, job_id) == []


@pytest.mark.parametrize("fault", ["500", "429"])
async def test_stripe_outage_is_retryable_and_the_retry_charges_once(
    pg: psycopg.AsyncConnection[Any],
    endpoint: StripeEndpoint,
    services: Services,
    fault: Any,
) -> None:
    job_id = await _new_job(pg)
    endpoint.inject(fault)
    with pytest.raises(Exception) as caught:
        async with pg.transaction():
            await charge(_bill(services, job_id, pg))
    assert not isinstance(caught.value, PermanentJobError)
    assert f"HTTP {fault}" in str(caught.value)
    _assert_no_secret(caught.value)

    async with pg.transaction():
        await charge(_bill(services, job_id, pg, attempt=2))
    assert len(endpoint.charges()) == 1


async def test_unreachable_stripe_is_retryable_without_the_key(
    pg: psycopg.AsyncConnection[Any], endpoint: StripeEndpoint, services: Services
) -> None:
    job_id = await _new_job(pg)
    await endpoint.stop()
    with pytest.raises(Exception) as caught:
        await charge(_bill(services, job_id, pg))
    assert not isinstance(caught.value, PermanentJobError)
    assert "will retry" in str(caught.value)
    _assert_no_secret(caught.value)


async def test_a_key_echoed_by_stripe_is_masked() -> None:
    async def unauthorized(request: web.Request) -> web.Response:
        key = request.headers["Authorization"].removeprefix("Bearer ")
        error = {"type": "invalid_request_error", "message": f"Invalid API Key provided: {key}"}
        return web.json_response({"error": error}, status=401)

    app = web.Application()
    app.router.add_post("/v1/payment_intents", unauthorized)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        services = Services(
            stripe=StripeSettings(api_key=SECRET_KEY, api_base=f"http://127.0.0.1:{port}")
        )
        with pytest.raises(PermanentJobError, match="HTTP 401") as caught:
            await charge(_bill(services, 1, None))
        assert "Invalid API Key provided" in str(caught.value)
        _assert_no_secret(caught.value)
    finally:
        await runner.cleanup()


async def test_concurrent_attempts_of_one_job_charge_once(
    pg: psycopg.AsyncConnection[Any],
    database_url: str,
    endpoint: StripeEndpoint,
    services: Services,
) -> None:
    job_id = await _new_job(pg)
    endpoint.set_latency(0.2)
    async with await psycopg.AsyncConnection.connect(database_url) as other:

        async def run(connection: psycopg.AsyncConnection[Any], number: int) -> None:
            async with connection.transaction():
                await charge(_bill(services, job_id, connection, attempt=number))

        outcomes = await asyncio.gather(run(pg, 1), run(other, 2), return_exceptions=True)
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(failures) == 1
    assert not isinstance(failures[0], PermanentJobError)
    assert "409" in str(failures[0])
    assert len(endpoint.charges()) == 1


async def test_a_changed_payload_under_the_same_job_is_refused_not_charged_twice(
    pg: psycopg.AsyncConnection[Any], endpoint: StripeEndpoint, services: Services
) -> None:
    job_id = await _new_job(pg)
    async with pg.transaction(force_rollback=True):
        await charge(_bill(services, job_id, pg))
    changed = Attempt(
        job_id=job_id,
        kind="billing",
        payload={**BILL, "amount": 2999},
        services=services,
        conn=pg,
        attempt=2,
    )
    with pytest.raises(PermanentJobError, match="idempotent"):
        await charge(changed)
    assert len(endpoint.charges()) == 1


async def test_billing_without_stripe_settings_is_retryable_and_says_what_to_set(
    pg: psycopg.AsyncConnection[Any],
) -> None:
    with pytest.raises(RuntimeError, match="STRIPE_API_KEY"):
        await charge(_bill(Services(), 1, pg))


async def test_record_statements_match_the_tables(
    pg: psycopg.AsyncConnection[Any],
) -> None:
    job_id = await _new_job(pg)
    async with pg.transaction(force_rollback=True):
        charge_row = {"job_id": job_id, "payment_intent": "pi_1", "amount": 5,
                      "currency": "eur", "customer": "cus_x", "attempt": 1, "worker_id": "a",
                      "status": "requires_action"}
        await pg.execute(tb_sql.RECORD_CHARGE, charge_row)
        # A later attempt's replay updates the status and keeps who charged.
        await pg.execute(tb_sql.RECORD_CHARGE, charge_row | {"attempt": 2, "worker_id": "b",
                                                             "status": "succeeded"})
        assert await _recorded(pg, job_id) == [("pi_1", 5, "eur", "cus_x")]
        cur = await pg.execute(
            "SELECT attempt, worker_id, status FROM taskboard_billing_charges WHERE job_id = %s",
            (job_id,),
        )
        assert await cur.fetchall() == [(1, "a", "succeeded")]
        send = {"job_id": job_id, "attempt": 1, "message_id": "<m@x>", "worker_id": "a",
                "recipients": ["x@example.com", "y@example.com"]}
        await pg.execute(tb_sql.RECORD_SENDS, send)
        await pg.execute(tb_sql.RECORD_SENDS, send)  # written again after a lost answer
        cur = await pg.execute(
            "SELECT attempt, recipient FROM taskboard_email_sends WHERE job_id = %s"
            " ORDER BY recipient", (job_id,),
        )
        assert await cur.fetchall() == [(1, "x@example.com"), (1, "y@example.com")]
