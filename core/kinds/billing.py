"""The `billing` kind: charge a customer through Stripe's PaymentIntents API.

The charge is an external effect the lease fence cannot retract, so every request carries an
`Idempotency-Key` derived from the installation and the job's identity (a random UUID drawn
at enqueue, never the lease token, never the bare id, which comes back after a restore):
when a reclaimed job runs again, or a stalled worker resumes, Stripe replays the first
response instead of charging twice. The PaymentIntent Stripe answered with is recorded at
once, on its own (`EffectTicket.record`), not in the handler's transaction: a cancelled,
timed-out, rejected or lost attempt keeps the record of the money it moved. Creating and
confirming are durable steps (`ctx.step`): a reclaimed job does not create a second intent.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from taskboard.core.base import tracing
from taskboard.core.base.errors import PermanentJobError, ValidationError
from taskboard.core.base.services import Services, StripeSettings, open_stripe_client
from taskboard.core.kinds.registry import ChargeEffect, JobContext, JobKind, JsonObject

if TYPE_CHECKING:
    import stripe

T = TypeVar("T")

FIELDS = frozenset({"customer", "amount", "currency", "description", "payment_method"})
MAX_AMOUNT = 99_999_999  # Stripe's limit: eight digits in the smallest currency unit
MAX_DESCRIPTION_CHARS = 1000
JOB_METADATA_KEY = "taskboard_job"
_CUSTOMER_ID = re.compile(r"cus_[A-Za-z0-9_]{1,250}")
_PAYMENT_METHOD_ID = re.compile(r"pm_[A-Za-z0-9_]{1,250}")

# ISO 4217 codes of circulating currencies (fund codes, metals and test codes left out),
# including both codes of the currencies in transition (ANG/XCG, SLL/SLE, ZWL/ZWG).
CURRENCIES = frozenset(
    """
    aed afn all amd ang aoa ars aud awg azn bam bbd bdt bgn bhd bif bmd bnd bob brl bsd
    btn bwp byn bzd cad cdf chf clp cny cop crc cuc cup cve czk djf dkk dop dzd egp ern
    etb eur fjd fkp gbp gel ghs gip gmd gnf gtq gyd hkd hnl htg huf idr ils inr iqd irr
    isk jmd jod jpy kes kgs khr kmf kpw krw kwd kyd kzt lak lbp lkr lrd lsl lyd mad mdl
    mga mkd mmk mnt mop mru mur mvr mwk mxn myr mzn nad ngn nio nok npr nzd omr pab pen
    pgk php pkr pln pyg qar ron rsd rub rwf sar sbd scr sdg sek sgd shp sle sll sos srd
    ssp stn svc syp szl thb tjs tmt tnd top try ttd twd tzs uah ugx usd uyu uzs ved ves
    vnd vuv wst xaf xcd xcg xof xpf yer zar zmw zwg zwl
""".split()
)


def idempotency_key(installation_id: str, identity: str, step: str) -> str:
    """The key for one step (`create`, `confirm`) of the job `identity` names (its
    `JobContext.identity`), the same on every attempt.

    The installation's id is part of it: two databases sharing one Stripe account never
    replay each other's PaymentIntents. The identity, not the id: a job id that comes back
    (a restore, a failover that lost commits) would otherwise be "charged" with a lost job's
    replayed PaymentIntent while no money moved, or refused for different parameters. Jobs
    enqueued before migration 9 have their id as identity, so their keys did not change.
    """
    return f"taskboard-{installation_id}-job-{identity}-{step}"


def validate_billing_payload(payload: Any) -> JsonObject:
    """Check and normalise a `billing` payload; raises `ValidationError` naming the field."""
    unknown = sorted(set(payload) - FIELDS)
    if unknown:
        raise ValidationError(
            f"unknown fields {unknown} (known: {', '.join(sorted(FIELDS))})", field="payload"
        )
    customer = payload.get("customer")
    if not isinstance(customer, str) or not _CUSTOMER_ID.fullmatch(customer):
        raise ValidationError("must be a Stripe customer id like cus_123", field="customer")
    amount = payload.get("amount")
    # bool is an int in Python, and 10.0 would silently become a different type in JSON.
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise ValidationError(
            "must be a whole number of the currency's smallest unit (e.g. cents)", field="amount"
        )
    if not 0 < amount <= MAX_AMOUNT:
        raise ValidationError(f"must be between 1 and {MAX_AMOUNT}", field="amount")
    currency = payload.get("currency")
    if not isinstance(currency, str) or currency.lower() not in CURRENCIES:
        raise ValidationError("must be an ISO 4217 currency code like usd or eur", field="currency")
    result: JsonObject = {"customer": customer, "amount": amount, "currency": currency.lower()}
    description = payload.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise ValidationError("must be a string", field="description")
        if len(description) > MAX_DESCRIPTION_CHARS:
            raise ValidationError(
                f"is longer than {MAX_DESCRIPTION_CHARS} characters", field="description"
            )
        try:
            description.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError("is not valid Unicode text", field="description") from None
        result["description"] = description
    method = payload.get("payment_method")
    if method is not None:
        if not isinstance(method, str) or not _PAYMENT_METHOD_ID.fullmatch(method):
            raise ValidationError(
                "must be a Stripe payment method id like pm_123", field="payment_method"
            )
        result["payment_method"] = method
    return result


async def charge(ctx: JobContext) -> dict[str, Any]:
    """Create and confirm a PaymentIntent for a `billing` job, in two durable steps
    (`create`, `confirm`), and record the charge.

    A reclaimed job whose `create` was recorded does not create another intent, and one
    whose `confirm` was recorded does not call Stripe at all; only the step in flight
    repeats, with the same Idempotency-Key, so Stripe replays it. A declined card or a
    refused request raises `PermanentJobError`; rate limits, Stripe server errors and
    network failures raise an ordinary exception so the worker retries.
    """
    services = ctx.services
    if not isinstance(services, Services) or not services.stripe.configured:
        raise RuntimeError(
            "Stripe is not configured: set STRIPE_API_KEY or TASKBOARD_STRIPE_API_BASE"
        )
    settings = services.stripe
    payload = ctx.payload
    create_params: dict[str, Any] = {
        "amount": payload["amount"],
        "currency": payload["currency"],
        "customer": payload["customer"],
        "metadata": {JOB_METADATA_KEY: str(ctx.job_id)},
    }
    for optional in ("description", "payment_method"):
        if payload.get(optional) is not None:
            create_params[optional] = payload[optional]
    key = ctx.installation_id
    async with open_stripe_client(settings) as client:
        intents = client.v1.payment_intents

        async def create() -> dict[str, Any]:
            # Each request is an external call: it starts only within the lease's local
            # deadline (a lost lease stops the job before the step that moves money), and
            # it carries the attempt it belongs to.
            idem = idempotency_key(key, ctx.identity, "create")
            async with ctx.external("stripe create") as ticket:
                options = _options(idem, ticket.headers())
                request = intents.create_async(create_params, options)  # type: ignore[arg-type]
                intent = await _call(settings, "create", idem, request)
            return {"id": intent.id, "status": str(intent.status)}

        async def confirm(intent_id: str) -> dict[str, Any]:
            idem = idempotency_key(key, ctx.identity, "confirm")
            async with ctx.external("stripe confirm") as ticket:
                options = _options(idem, ticket.headers())
                # off_session: the customer is not present to authenticate.
                request = intents.confirm_async(intent_id, {"off_session": True}, options)
                intent = await _call(settings, "confirm", idem, request)
                # Recorded before anything else can happen to the attempt (a cancel, a
                # timeout, a lost lease all wait for the end of this block), on its own.
                await ticket.record(
                    ChargeEffect(
                        payment_intent=intent.id,
                        amount=payload["amount"],
                        currency=payload["currency"],
                        customer=payload["customer"],
                        status=str(intent.status),
                    )
                )
            return {"id": intent.id, "status": str(intent.status), "replayed": _replayed(intent)}

        created = await ctx.step("create", create)
        confirmed = await ctx.step("confirm", confirm, created["id"])
    if confirmed["status"] != "succeeded":
        raise PermanentJobError(
            f"Stripe PaymentIntent {confirmed['id']} ended as {confirmed['status']}, "
            "not succeeded"
        )
    amount = f"{payload['amount']} {payload['currency']}"
    # A replayed confirmation means an earlier attempt already moved the money.
    ctx.note(
        f"charge replayed by Stripe: {confirmed['id']} ({amount})"
        if confirmed["replayed"]
        else f"charged {amount} to {payload['customer']}: {confirmed['id']}"
    )
    return {"payment_intent": confirmed["id"], "status": confirmed["status"]}


def _options(idem: str, headers: dict[str, str]) -> stripe.RequestOptions:
    """A request's options: the key that makes a replay safe, and the attempt's headers."""
    return {"idempotency_key": idem, "headers": headers}


def _replayed(obj: stripe.StripeObject) -> bool:
    response = obj.last_response
    return response is not None and response.headers.get("idempotent-replayed") == "true"


async def _call(settings: StripeSettings, operation: str, idem: str, request: Awaitable[T]) -> T:
    """Await one SDK call (`operation`, sent with idempotency key `idem`) in its span,
    turning Stripe's errors into the worker's retry/dead outcomes."""
    import stripe

    with tracing.stripe_request(idem, operation):
        try:
            return await request
        except stripe.StripeError as exc:
            raise _stripe_failure(exc, settings) from None


def _stripe_failure(exc: stripe.StripeError, settings: StripeSettings) -> Exception:
    """A retryable or permanent error from a Stripe failure, with the API key scrubbed.

    The SDK's exception is not chained: it holds request details a log should not carry.
    """
    import stripe

    status = exc.http_status
    error = exc.error
    parts = [f"HTTP {status}" if status else "no response"]
    if error is not None and error.code:
        parts.append(error.code)
    if isinstance(exc, stripe.CardError) and error is not None and error.decline_code:
        parts.append(f"decline_code={error.decline_code}")
    message = " ".join(str(exc.user_message or type(exc).__name__).split())
    detail = settings.redact(f"{' '.join(parts)}: {message}")
    if isinstance(exc, stripe.CardError):
        return PermanentJobError(f"card declined ({detail})")
    retryable = isinstance(exc, stripe.RateLimitError | stripe.APIConnectionError) or (
        status is None or status == 409 or status >= 500
    )
    if retryable:
        return RuntimeError(f"Stripe unavailable, will retry ({detail})")
    return PermanentJobError(f"Stripe refused the request ({detail})")


BILLING = JobKind(
    name="billing",
    validate=validate_billing_payload,
    handler=charge,
    writes_db=True,
    cancel_safe=False,
    external_effect="charge deduplicated by Idempotency-Key",
)
