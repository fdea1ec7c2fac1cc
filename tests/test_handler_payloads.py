"""Payload validation at enqueue, and service configuration from the environment.

Every rejection names the field at fault, and nothing a user configures as a secret ever
shows up in an error, a repr or a description.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from taskboard.core.base.errors import ConfigError, ValidationError
from taskboard.core.base.services import (
    LOCAL_STRIPE_KEY,
    Services,
    SmtpSettings,
    StripeSettings,
    parse_smtp_url,
    services_from_env,
)
from taskboard.core.kinds import builtin_registry
from taskboard.core.kinds.billing import validate_billing_payload
from taskboard.core.kinds.email import (
    MAX_BODY_BYTES,
    MAX_RECIPIENTS,
    MAX_SUBJECT_CHARS,
    validate_email_payload,
)

EMAIL: dict[str, Any] = {"to": "maya@example.com", "subject": "Receipt", "text": "Thanks"}
BILLING: dict[str, Any] = {"customer": "cus_maya", "amount": 1999, "currency": "EUR"}
SECRET_KEY = "sk_live_51HsecretSECRETsecret"


def _rejected_field(validate: Any, payload: dict[str, Any]) -> str | None:
    with pytest.raises(ValidationError) as caught:
        validate(payload)
    assert caught.value.field is not None
    assert str(caught.value).startswith(f"{caught.value.field}: ")
    return caught.value.field


# -- email ---------------------------------------------------------------------------


def test_email_payload_is_normalised() -> None:
    payload = validate_email_payload(
        {
            **EMAIL,
            "to": ["Maya <maya@Example.com>", "ops@bücher.example", "MAYA@example.com"],
            "from": "Billing <billing@example.com>",
            "reply_to": "help@example.com",
            "html": "<p>Thanks</p>",
        }
    )
    # Domains in ASCII and lower case; the same mailbox twice is sent once.
    assert payload["to"] == ["Maya <maya@example.com>", "ops@xn--bcher-kva.example"]
    assert payload["reply_to"] == ["help@example.com"]
    assert payload["from"] == "Billing <billing@example.com>"
    assert payload["html"] == "<p>Thanks</p>"


def test_email_to_may_be_a_single_string() -> None:
    assert validate_email_payload(EMAIL)["to"] == ["maya@example.com"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"to": None}, "to"),
        ({"to": []}, "to"),
        ({"to": 42}, "to"),
        ({"to": "maya"}, "to"),
        ({"to": "maya@"}, "to"),
        ({"to": "@example.com"}, "to"),
        ({"to": "maya@@example.com"}, "to"),
        ({"to": "maya@localhost"}, "to"),
        ({"to": "maya@[127.0.0.1]"}, "to"),
        ({"to": "maya@example.com, ops@example.com"}, "to"),
        ({"to": "friends: maya@example.com;"}, "to"),
        ({"to": "maya@example.com\r\nBcc: victim@example.com"}, "to"),
        ({"to": ["maya@example.com", "not an address"]}, "to"),
        ({"to": [f"user{i}@example.com" for i in range(MAX_RECIPIENTS + 1)]}, "to"),
        ({"subject": None}, "subject"),
        ({"subject": "   "}, "subject"),
        ({"subject": "Hi\r\nBcc: victim@example.com"}, "subject"),
        ({"subject": "Hi\nthere"}, "subject"),
        ({"subject": "x" * (MAX_SUBJECT_CHARS + 1)}, "subject"),
        ({"text": None}, "text"),
        ({"text": b"bytes"}, "text"),
        ({"text": "x" * (MAX_BODY_BYTES + 1)}, "text"),
        ({"text": "nul\x00byte"}, "text"),
        ({"html": 5}, "html"),
        ({"html": "é" * (MAX_BODY_BYTES // 2 + 1)}, "html"),
        ({"from": "Billing <billing@example.com>\nBcc: x@example.com"}, "from"),
        ({"from": "billing"}, "from"),
        ({"reply_to": ["help@example.com", "nope"]}, "reply_to"),
        ({"cc": "x@example.com"}, "payload"),
    ],
)
def test_bad_email_payload_is_rejected_naming_the_field(change: dict[str, Any], field: str) -> None:
    assert _rejected_field(validate_email_payload, {**EMAIL, **change}) == field


def test_missing_to_is_rejected() -> None:
    assert _rejected_field(validate_email_payload, {"subject": "s", "text": "t"}) == "to"


@given(st.one_of(st.text(max_size=60), st.lists(st.text(max_size=30), max_size=3), st.integers()))
def test_any_to_value_is_accepted_clean_or_rejected_as_to(value: Any) -> None:
    try:
        payload = validate_email_payload({**EMAIL, "to": value})
    except ValidationError as exc:
        assert exc.field == "to"
    else:
        assert all("\r" not in a and "\n" not in a and "@" in a for a in payload["to"])


@given(st.text(max_size=80))
def test_accepted_subjects_never_carry_line_breaks(subject: str) -> None:
    try:
        payload = validate_email_payload({**EMAIL, "subject": subject})
    except ValidationError as exc:
        assert exc.field == "subject"
    else:
        assert "\r" not in payload["subject"] and "\n" not in payload["subject"]


# -- billing -------------------------------------------------------------------------


def test_billing_payload_is_normalised() -> None:
    payload = validate_billing_payload(
        {**BILLING, "description": "March", "payment_method": "pm_card_visa"}
    )
    assert payload == {
        "customer": "cus_maya",
        "amount": 1999,
        "currency": "eur",
        "description": "March",
        "payment_method": "pm_card_visa",
    }


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"amount": True}, "amount"),
        ({"amount": 19.99}, "amount"),
        ({"amount": 20.0}, "amount"),
        ({"amount": "1999"}, "amount"),
        ({"amount": 0}, "amount"),
        ({"amount": -5}, "amount"),
        ({"amount": 100_000_000}, "amount"),
        ({"amount": None}, "amount"),
        ({"currency": "xyz"}, "currency"),
        ({"currency": "us"}, "currency"),
        ({"currency": "usdd"}, "currency"),
        ({"currency": "XTS"}, "currency"),
        ({"currency": 840}, "currency"),
        ({"customer": None}, "customer"),
        ({"customer": "maya"}, "customer"),
        ({"customer": "cus_"}, "customer"),
        ({"customer": "cus_maya\n"}, "customer"),
        ({"description": 5}, "description"),
        ({"description": "x" * 1001}, "description"),
        ({"payment_method": "card"}, "payment_method"),
        ({"idempotency_key": "mine"}, "payload"),
    ],
)
def test_bad_billing_payload_is_rejected_naming_the_field(
    change: dict[str, Any], field: str
) -> None:
    assert _rejected_field(validate_billing_payload, {**BILLING, **change}) == field


@pytest.mark.parametrize("currency", ["usd", "EUR", "jpy", "Chf", "xof"])
def test_real_currency_codes_are_accepted_in_any_case(currency: str) -> None:
    assert validate_billing_payload({**BILLING, "currency": currency})["currency"] == (
        currency.lower()
    )


# -- registration --------------------------------------------------------------------


def test_builtin_registry_holds_email_and_billing_with_their_flags() -> None:
    registry = builtin_registry()
    email, billing = registry.get("email"), registry.get("billing")
    assert (email.writes_db, email.cancel_safe) == (False, False)
    assert "Message-ID" in (email.external_effect or "")
    assert (billing.writes_db, billing.cancel_safe) == (True, False)
    assert "Idempotency-Key" in (billing.external_effect or "")
    assert registry.validate("billing", BILLING)["currency"] == "eur"
    with pytest.raises(ValidationError) as caught:
        registry.validate("email", {**EMAIL, "to": "nobody"})
    assert caught.value.field == "to"


# -- configuration -------------------------------------------------------------------


def test_nothing_configured_means_no_smtp_and_no_stripe() -> None:
    services = services_from_env({})
    assert services.smtp is None
    assert not services.stripe.configured
    assert services.describe() == "smtp: not configured | stripe: not configured"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("smtp://mail.example.com", SmtpSettings("mail.example.com", 25)),
        (
            "smtp://maya:p%40ss@mail.example.com:2525?starttls=1",
            SmtpSettings("mail.example.com", 2525, "maya", "p@ss", "starttls"),
        ),
        (
            "smtp://mail.example.com?starttls=1",
            SmtpSettings("mail.example.com", 587, tls="starttls"),
        ),
        (
            "smtps://u:p@mail.example.com",
            SmtpSettings("mail.example.com", 465, "u", "p", "implicit"),
        ),
        ("smtp://[::1]:1025?timeout=2.5", SmtpSettings("::1", 1025, timeout=2.5)),
    ],
)
def test_smtp_url_is_parsed(url: str, expected: SmtpSettings) -> None:
    assert parse_smtp_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "http://maya:hunter2@mail.example.com",
        "smtp://maya:hunter2@mail.example.com:notaport",
        "smtp://maya:hunter2@mail.example.com:70000",
        "smtp://maya:hunter2@",
        "smtps://maya:hunter2@mail.example.com?starttls=1",
        "smtp://maya:hunter2@mail.example.com?starttls=maybe",
        "smtp://maya:hunter2@mail.example.com?tls=1",
        "smtp://maya:hunter2@mail.example.com/path",
        "smtp://maya:hunter2@mail.example.com?timeout=-1",
        "smtp://:hunter2@mail.example.com",
        "smtp://maya:hunter2@mail.exa\nmple.com",
    ],
)
def test_bad_smtp_url_is_a_one_line_config_error_without_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        services_from_env({"TASKBOARD_SMTP_URL": url})
    message = str(caught.value)
    assert "hunter2" not in message
    assert "\n" not in message
    assert "TASKBOARD_SMTP_URL" in message


def test_secrets_never_appear_in_repr_or_description() -> None:
    services = services_from_env(
        {
            "TASKBOARD_SMTP_URL": "smtp://maya:hunter2@mail.example.com:25",
            "STRIPE_API_KEY": SECRET_KEY,
        }
    )
    assert services.smtp is not None and services.smtp.password == "hunter2"
    assert services.stripe.api_key == SECRET_KEY
    for text in (repr(services), str(services), services.describe()):
        assert "hunter2" not in text
        assert SECRET_KEY not in text
    assert services.smtp_target == "smtp://maya:***@mail.example.com:25"
    assert services.stripe_target == "stripe: sk_live_…(masked) → api.stripe.com"


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({"STRIPE_API_KEY": "pk_live_123abc"}, "publishable"),
        ({"STRIPE_API_KEY": "hunter2"}, "does not look like"),
        ({"TASKBOARD_STRIPE_API_BASE": "ftp://127.0.0.1"}, "http"),
        ({"TASKBOARD_STRIPE_API_BASE": "http://127.0.0.1:1/v1"}, "path"),
        (
            {"STRIPE_API_KEY": SECRET_KEY, "TASKBOARD_STRIPE_API_BASE": "http://stripe.example"},
            "https",
        ),
        ({"TASKBOARD_MAIL_FROM": "not an address"}, "TASKBOARD_MAIL_FROM"),
        ({"TASKBOARD_MESSAGE_ID_DOMAIN": "bad domain"}, "TASKBOARD_MESSAGE_ID_DOMAIN"),
    ],
)
def test_bad_stripe_and_mail_settings_are_config_errors(env: dict[str, str], wanted: str) -> None:
    with pytest.raises(ConfigError) as caught:
        services_from_env(env)
    assert wanted in str(caught.value)
    assert "hunter2" not in str(caught.value)
    assert SECRET_KEY not in str(caught.value)


def test_local_endpoint_gets_a_placeholder_key_and_real_settings_win() -> None:
    local = services_from_env({"TASKBOARD_STRIPE_API_BASE": "http://127.0.0.1:4242/"})
    assert local.stripe.api_base == "http://127.0.0.1:4242"
    assert local.stripe.effective_key == LOCAL_STRIPE_KEY
    assert local.stripe_target == "stripe: local endpoint http://127.0.0.1:4242"

    configured = Services(
        smtp=SmtpSettings("mail.example.com", 25), stripe=StripeSettings(api_key=SECRET_KEY)
    )
    assert configured.with_local_smtp("127.0.0.1", 2525).smtp == configured.smtp
    assert configured.with_local_stripe("http://127.0.0.1:1").stripe == configured.stripe
    embedded = Services().with_local_smtp("127.0.0.1", 2525).with_local_stripe("http://x:1")
    assert embedded.smtp is not None and embedded.smtp.port == 2525
    assert embedded.stripe.api_base == "http://x:1"


def test_mail_from_and_message_id_domain_come_from_the_environment() -> None:
    services = services_from_env(
        {
            "TASKBOARD_MAIL_FROM": "Billing <billing@Example.com>",
            "TASKBOARD_MESSAGE_ID_DOMAIN": "Mail.Example.com",
        }
    )
    assert services.mail_from == "Billing <billing@example.com>"
    assert services.message_id_domain == "mail.example.com"
