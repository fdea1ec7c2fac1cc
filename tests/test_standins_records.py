"""What the stand-ins record for an audit of "no effect starts after its attempt's local
deadline": when each SMTP transaction and each Stripe request started, and the job, attempt
and deadline the caller stamped on it. Real sends: aiosmtplib to the sink, the stripe SDK
to the endpoint.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import aiosmtplib
import pytest
import pytest_asyncio
import stripe
from taskboard.core.base.services import StripeSettings, open_stripe_client
from taskboard.core.standins.smtp_sink import ReceivedMessage, SmtpSink
from taskboard.core.standins.stamps import AttemptStamp
from taskboard.core.standins.stripe_endpoint import StripeEndpoint, fetch_charges

STANDINS = Path(__file__).resolve().parents[1] / "core" / "standins"
PARAMS: Any = {
    "amount": 1200,
    "currency": "eur",
    "customer": "cus_maya",
    "metadata": {"taskboard_job": "31"},
}


def _stamp_headers(job: int, attempt: int, deadline: float) -> dict[str, str]:
    return {
        "X-Taskboard-Job": str(job),
        "X-Taskboard-Attempt": str(attempt),
        "X-Taskboard-Deadline": f"{deadline:.3f}",
    }


def _message(headers: dict[str, str]) -> EmailMessage:
    message = EmailMessage()
    message["From"] = "taskboard@example.com"
    message["To"] = "maya@example.com"
    message["Subject"] = "Your receipt"
    message["Message-ID"] = "<taskboard-job-31@taskboard.local>"
    for name, value in headers.items():
        message[name] = value
    message.set_content("Thanks!")
    return message


@pytest_asyncio.fixture
async def client(endpoint: StripeEndpoint) -> AsyncIterator[stripe.StripeClient]:
    async with open_stripe_client(StripeSettings(api_base=endpoint.base_url)) as sdk:
        yield sdk


async def test_a_message_records_when_its_transaction_started_and_its_stamp(
    sink: SmtpSink,
) -> None:
    deadline = time.time() + 30
    sink.set_latency(0.2)  # between MAIL FROM and the DATA reply
    before = datetime.now(UTC)
    await aiosmtplib.send(
        _message(_stamp_headers(31, 2, deadline)), hostname=sink.host, port=sink.port, timeout=5
    )

    [message] = sink.messages()
    assert message.started_at is not None
    assert before <= message.started_at
    assert message.received_at - message.started_at >= timedelta(seconds=0.2)
    assert message.stamp == AttemptStamp(job=31, attempt=2, deadline=round(deadline, 3))


async def test_each_message_of_one_connection_gets_its_own_start(sink: SmtpSink) -> None:
    async with aiosmtplib.SMTP(hostname=sink.host, port=sink.port, timeout=5) as smtp:
        await smtp.send_message(_message({}))
        sink.set_latency(0.1)
        await smtp.send_message(_message({}))
    first, second = sink.messages()
    assert first.started_at is not None and second.started_at is not None
    assert first.received_at <= second.started_at < second.received_at
    assert second.stamp == AttemptStamp()  # no stamp headers: nothing made up


def test_malformed_stamps_read_as_missing() -> None:
    message = ReceivedMessage(
        received_at=datetime.now(UTC),
        mail_from="",
        recipients=(),
        subject="",
        message_id=None,
        size=0,
        headers=(
            ("X-Taskboard-Job", "7a"),
            ("X-Taskboard-Attempt", "-1"),
            ("X-Taskboard-Deadline", "nan"),
        ),
    )
    assert message.started_at is None
    assert message.stamp == AttemptStamp()


async def test_requests_record_arrival_and_stamp_and_the_charge_names_the_confirming_one(
    client: stripe.StripeClient, endpoint: StripeEndpoint
) -> None:
    deadline = time.time() + 30
    endpoint.set_latency(0.2)  # the money moves 0.2 s after the request arrived
    before = datetime.now(UTC)
    intent = await client.v1.payment_intents.create_async(
        PARAMS, {"idempotency_key": "k-create", "headers": _stamp_headers(31, 1, deadline)}
    )
    await client.v1.payment_intents.confirm_async(
        intent.id,
        {"off_session": True},
        {"idempotency_key": "k-confirm", "headers": _stamp_headers(31, 2, deadline + 1)},
    )
    # A later attempt's confirmation is replayed: it moves no money, so it is not the one.
    await client.v1.payment_intents.confirm_async(
        intent.id,
        {"off_session": True},
        {"idempotency_key": "k-confirm", "headers": _stamp_headers(31, 3, deadline + 2)},
    )

    create, confirm, replay = endpoint.requests()
    assert (create.job, create.attempt, create.deadline) == (31, 1, round(deadline, 3))
    assert (confirm.attempt, confirm.replayed, replay.attempt, replay.replayed) == (
        2,
        False,
        3,
        True,
    )
    assert before <= create.arrived_at <= confirm.arrived_at <= replay.arrived_at
    assert create.at == create.arrived_at

    [charge] = endpoint.charges()
    assert charge.confirm_arrived_at == confirm.arrived_at
    assert (charge.confirm_attempt, charge.confirm_deadline) == (2, round(deadline + 1, 3))
    assert charge.created - confirm.arrived_at >= timedelta(seconds=0.2)
    assert charge.replays == 1
    # Another process reads the same record over HTTP.
    assert await fetch_charges(endpoint.base_url) == (charge,)


async def test_create_with_confirm_is_the_request_that_moved_the_money(
    client: stripe.StripeClient, endpoint: StripeEndpoint
) -> None:
    await client.v1.payment_intents.create_async(
        {**PARAMS, "confirm": True},
        {"idempotency_key": "k-one-step", "headers": _stamp_headers(31, 4, 1764720000.123)},
    )
    [charge] = endpoint.charges()
    [request] = endpoint.requests()
    assert charge.confirm_key == "k-one-step"
    assert (charge.confirm_arrived_at, charge.confirm_attempt, charge.confirm_deadline) == (
        request.arrived_at,
        4,
        1764720000.123,
    )


async def test_unstamped_and_refused_requests_are_recorded_too(
    client: stripe.StripeClient, endpoint: StripeEndpoint
) -> None:
    endpoint.inject("429")
    with pytest.raises(stripe.RateLimitError):
        await client.v1.payment_intents.create_async(PARAMS, {"idempotency_key": "k-429"})
    [refused] = endpoint.requests()
    assert refused.status == 429
    assert refused.stamp == AttemptStamp()
    assert refused.arrived_at.tzinfo is not None


def test_only_the_runtime_knows_the_board() -> None:
    """The stand-ins keep their own records; turning them into the dashboard's rows is
    the runtime's job, so the board can change without touching the servers."""
    importers = sorted(
        path.name for path in STANDINS.glob("*.py") if "taskboard.core.view.board" in path.read_text()
    )
    assert importers == ["runtime.py"]
