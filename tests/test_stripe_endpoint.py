"""The local Stripe endpoint, driven by the real `stripe` SDK.

The promises are Stripe's documented idempotency rules: the same key with the same request
replays the first response, the same key with a different request is an error, a key still
in flight is a conflict, and requests refused before executing save nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import stripe
from taskboard.core.base.services import StripeSettings, open_stripe_client
from taskboard.core.standins.stripe_endpoint import StripeEndpoint, fetch_charges

PARAMS: dict[str, Any] = {
    "amount": 1999,
    "currency": "eur",
    "customer": "cus_maya",
    "metadata": {"taskboard_job": "7"},
}


@pytest_asyncio.fixture
async def client(endpoint: StripeEndpoint) -> AsyncIterator[stripe.StripeClient]:
    async with open_stripe_client(StripeSettings(api_base=endpoint.base_url)) as sdk:
        yield sdk


async def _create(client: stripe.StripeClient, key: str, **changes: Any) -> stripe.PaymentIntent:
    params: Any = {**PARAMS, **changes}
    return await client.v1.payment_intents.create_async(params, {"idempotency_key": key})


async def _confirm(client: stripe.StripeClient, pid: str, key: str) -> stripe.PaymentIntent:
    return await client.v1.payment_intents.confirm_async(
        pid, {"off_session": True}, {"idempotency_key": key}
    )


def _replayed(obj: stripe.PaymentIntent) -> str | None:
    assert obj.last_response is not None
    return obj.last_response.headers.get("idempotent-replayed")


async def test_create_and_confirm_answer_stripe_shaped_payment_intents(
    client: stripe.StripeClient, endpoint: StripeEndpoint
) -> None:
    intent = await _create(client, "k-create")
    assert intent.id.startswith("pi_")
    assert intent.object == "payment_intent"
    assert (intent.amount, intent.currency, intent.customer) == (1999, "eur", "cus_maya")
    assert intent.metadata["taskboard_job"] == "7"
    assert intent.status == "requires_payment_method"
    assert endpoint.charges() == ()

    confirmed = await _confirm(client, intent.id, "k-confirm")
    assert confirmed.status == "succeeded"
    assert confirmed.amount_received == 1999
    fetched = await client.v1.payment_intents.retrieve_async(intent.id)
    assert fetched.status == "succeeded"

    [charge] = endpoint.charges()
    assert charge.payment_intent == intent.id
    assert (charge.amount, charge.currency, charge.customer) == (1999, "eur", "cus_maya")
    assert (charge.idempotency_key, charge.confirm_key) == ("k-create", "k-confirm")
    assert charge.job_id == 7
    assert charge.replays == 0


async def test_same_key_same_params_replays_the_first_response(
    client: stripe.StripeClient, endpoint: StripeEndpoint
) -> None:
    first = await _create(client, "k-replay")
    again = await _create(client, "k-replay")
    assert again.id == first.id
    assert _replayed(first) is None
    assert _replayed(again) == "true"

    confirmed = await _confirm(client, first.id, "k-replay-confirm")
    confirmed_again = await _confirm(client, first.id, "k-replay-confirm")
    assert _replayed(confirmed_again) == "true"
    assert confirmed_again.latest_charge == confirmed.latest_charge
    [charge] = endpoint.charges()
    assert charge.replays == 2


async def test_same_key_different_params_is_an_idempotency_error(
    client: stripe.StripeClient,
) -> None:
    await _create(client, "k-mismatch")
    with pytest.raises(stripe.IdempotencyError) as caught:
        await _create(client, "k-mismatch", amount=2000)
    assert caught.value.http_status == 400
    assert caught.value.error is not None
    assert caught.value.error.type == "idempotency_error"


async def test_same_key_on_another_path_is_an_idempotency_error(
    client: stripe.StripeClient,
) -> None:
    intent = await _create(client, "k-path")
    with pytest.raises(stripe.IdempotencyError):
        await _confirm(client, intent.id, "k-path")


async def test_key_still_in_flight_gets_a_409_then_the_replay(
    client: stripe.StripeClient, endpoint: StripeEndpoint
) -> None:
    endpoint.inject("slow", seconds=0.3)
    first = asyncio.create_task(_create(client, "k-busy"))
    await asyncio.sleep(0.1)
    with pytest.raises(stripe.APIError) as caught:
        await _create(client, "k-busy")
    assert caught.value.http_status == 409
    assert caught.value.error is not None
    assert caught.value.error.type == "idempotency_error"
    original = await first
    assert (await _create(client, "k-busy")).id == original.id


async def test_injected_decline_is_a_card_error_and_is_replayed(
    client: stripe.StripeClient, endpoint: StripeEndpoint
) -> None:
    endpoint.inject("decline", decline_code="insufficient_funds")
    intent = await _create(client, "k-decline")
    with pytest.raises(stripe.CardError) as caught:
        await _confirm(client, intent.id, "k-decline-confirm")
    assert caught.value.http_status == 402
    assert caught.value.error is not None
    assert caught.value.error.decline_code == "insufficient_funds"
    # Stripe saves a response once execution began, declines included.
    with pytest.raises(stripe.CardError):
        await _confirm(client, intent.id, "k-decline-confirm")
    assert endpoint.charges() == ()


async def test_declining_test_card_is_declined(
    client: stripe.StripeClient, endpoint: StripeEndpoint
) -> None:
    intent = await _create(
        client, "k-test-card", payment_method="pm_card_chargeDeclinedInsufficientFunds"
    )
    assert intent.status == "requires_confirmation"
    with pytest.raises(stripe.CardError) as caught:
        await _confirm(client, intent.id, "k-test-card-confirm")
    assert caught.value.error is not None
    assert caught.value.error.decline_code == "insufficient_funds"
    assert endpoint.charges() == ()


@pytest.mark.parametrize(
    ("fault", "error", "status"),
    [("500", stripe.APIError, 500), ("429", stripe.RateLimitError, 429)],
)
async def test_refusals_before_execution_save_nothing(
    client: stripe.StripeClient,
    endpoint: StripeEndpoint,
    fault: Any,
    error: type[stripe.StripeError],
    status: int,
) -> None:
    endpoint.inject(fault)
    with pytest.raises(error) as caught:
        await _create(client, "k-refused")
    assert caught.value.http_status == status
    retried = await _create(client, "k-refused")
    assert _replayed(retried) is None
    assert [r.status for r in endpoint.requests()] == [status, 200]


async def test_confirming_a_succeeded_intent_again_is_refused(
    client: stripe.StripeClient, endpoint: StripeEndpoint
) -> None:
    intent = await _create(client, "k-twice")
    await _confirm(client, intent.id, "k-twice-confirm-1")
    with pytest.raises(stripe.InvalidRequestError) as caught:
        await _confirm(client, intent.id, "k-twice-confirm-2")
    assert caught.value.code == "payment_intent_unexpected_state"
    assert len(endpoint.charges()) == 1


async def test_unknown_payment_intent_is_404(client: stripe.StripeClient) -> None:
    with pytest.raises(stripe.InvalidRequestError) as caught:
        await client.v1.payment_intents.retrieve_async("pi_missing")
    assert caught.value.http_status == 404


async def test_charges_are_readable_over_http(
    client: stripe.StripeClient, endpoint: StripeEndpoint
) -> None:
    intent = await _create(client, "k-http")
    await _confirm(client, intent.id, "k-http-confirm")
    assert await fetch_charges(endpoint.base_url) == endpoint.charges()


async def test_requests_without_an_api_key_are_refused(endpoint: StripeEndpoint) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{endpoint.base_url}/v1/payment_intents", data={"amount": "1"}) as reply,
    ):
        assert reply.status == 401
        assert (await reply.json())["error"]["type"] == "invalid_request_error"
