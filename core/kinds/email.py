"""The `email` kind: validate a message at enqueue, send it over SMTP in the worker.

The fence cannot retract a send: a stalled worker that resumes after its lease was taken may
already have delivered the message, and the new owner delivers it again. Every attempt of a
job therefore carries the same `Message-ID`, derived from the job's identity alone (a random
UUID drawn at enqueue: a job id that comes back after a restore must not reuse a lost job's
Message-ID, which receivers would drop as a duplicate), so receivers can drop the duplicate.
Each copy the relay accepts is recorded on its own at once (`taskboard_email_sends`), so a
duplicate shows with any relay and a cancelled or rejected attempt keeps its sends. The send
is a durable step (`ctx.step`): a reclaimed job whose send was recorded does not send again.
"""

from __future__ import annotations

from collections.abc import Mapping
from email.headerregistry import Address
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from email.utils import formatdate
from typing import Any

import aiosmtplib
from taskboard.core.base import tracing
from taskboard.core.base.addresses import has_control, parse_address
from taskboard.core.base.errors import PermanentJobError, ValidationError
from taskboard.core.base.services import Services, redact
from taskboard.core.kinds.registry import JobContext, JobKind, JsonObject, SendEffect

MAX_RECIPIENTS = 50
MAX_SUBJECT_CHARS = 998  # RFC 5322 line limit
MAX_BODY_BYTES = 1024 * 1024
# Room for both bodies at their limit, the addresses and JSON's escapes (a line break is
# two bytes in JSON): above the 1 MiB default. A claim brings back at least one row, so an
# email larger than a claim's byte budget comes alone.
MAX_EMAIL_PAYLOAD_BYTES = 3 * MAX_BODY_BYTES
FIELDS = frozenset({"to", "subject", "text", "html", "from", "reply_to"})


def message_id_for(identity: str, domain: str) -> str:
    """The `Message-ID` of every attempt of the job `identity` names (its
    `JobContext.identity`; a job enqueued before migration 9 has its id as identity)."""
    return f"<taskboard-job-{identity}@{domain}>"


def validate_email_payload(payload: Any) -> JsonObject:
    """Check and normalise an `email` payload; raises `ValidationError` naming the field."""
    unknown = sorted(set(payload) - FIELDS)
    if unknown:
        raise ValidationError(
            f"unknown fields {unknown} (known: {', '.join(sorted(FIELDS))})", field="payload"
        )
    if "to" not in payload:
        raise ValidationError("is required", field="to")
    result: JsonObject = {
        "to": _address_list(payload["to"], "to"),
        "subject": _subject(payload.get("subject")),
        "text": _body(payload.get("text"), "text", required=True),
    }
    if payload.get("html") is not None:
        result["html"] = _body(payload["html"], "html", required=False)
    if payload.get("from") is not None:
        result["from"] = str(_one_address(payload["from"], "from"))
    if payload.get("reply_to") is not None:
        result["reply_to"] = _address_list(payload["reply_to"], "reply_to")
    return result


def build_message(
    payload: JsonObject,
    *,
    job_id: int,
    services: Services,
    headers: Mapping[str, str] | None = None,
    identity: str | None = None,
) -> EmailMessage:
    """The message for one attempt; only `Date` and the attempt's `X-Taskboard-*` headers
    (from `EffectTicket.headers()`) vary per attempt."""
    message = EmailMessage(policy=SMTP_POLICY)
    message["From"] = payload.get("from") or services.mail_from
    message["To"] = ", ".join(payload["to"])
    if payload.get("reply_to"):
        message["Reply-To"] = ", ".join(payload["reply_to"])
    message["Subject"] = payload["subject"]
    message["Date"] = formatdate(usegmt=True)
    key = str(job_id) if identity is None else identity
    message["Message-ID"] = message_id_for(key, services.message_id_domain)
    message["X-Taskboard-Job"] = str(job_id)
    for name, value in (headers or {}).items():
        if name != "X-Taskboard-Job":
            message[name] = value
    message.set_content(payload["text"])
    if payload.get("html"):
        message.add_alternative(payload["html"], subtype="html")
    return message


async def send_email(ctx: JobContext) -> dict[str, Any]:
    """Send one `email` job, in two durable steps: `render` (the Message-ID and Date every
    attempt then uses) and `send`, whose record names the Message-ID and the recipients the
    relay accepted. A reclaimed job whose send was recorded does not send again; what still
    repeats is only a send that was in flight (the relay took it, the record did not land).

    The headers carry the attempt (`X-Taskboard-Attempt`, the claim's ordinal) and the
    deadline it ran under, so duplicates can be traced to the reclaim that caused them.
    4xx replies and connection failures raise an ordinary exception (the worker retries with
    backoff); 5xx replies raise `PermanentJobError` (the job goes dead with the reply).
    """
    services = ctx.services
    if not isinstance(services, Services) or services.smtp is None:
        raise RuntimeError("SMTP is not configured: set TASKBOARD_SMTP_URL")
    rendered = await ctx.step("render", _render, ctx.identity, services.message_id_domain)
    sent = await ctx.step("send", _send, ctx, services, rendered)
    note = f"sent {sent['message_id']} to {len(sent['accepted'])} recipient(s)"
    if sent["refused"]:
        # The rest got the message; resending would duplicate it for them, so the refused
        # addresses are reported rather than retried.
        note += "; refused: " + "; ".join(sent["refused"])
    # No checkpoint after the send: once the message is out, completing (fenced) is better
    # than giving up, which would only make another worker send it again.
    ctx.note(f"{note}: {sent['reply']}")
    return {"message_id": sent["message_id"], "accepted": sent["accepted"]}


def _render(identity: str, domain: str) -> dict[str, str]:
    return {"message_id": message_id_for(identity, domain), "date": formatdate(usegmt=True)}


async def _send(
    ctx: JobContext, services: Services, rendered: dict[str, str]
) -> dict[str, Any]:
    smtp = services.smtp
    assert smtp is not None
    sender = _one_address(ctx.payload.get("from") or services.mail_from, "from").addr_spec
    recipients = [_one_address(to, "to").addr_spec for to in ctx.payload["to"]]
    # The send is the effect the fence cannot retract: it starts only within the lease's
    # local deadline, and once started it is never cut in half by a lost lease or a drain.
    async with ctx.external("smtp send") as ticket:
        message = build_message(
            ctx.payload,
            job_id=ctx.job_id,
            services=services,
            headers=ticket.headers(),
            identity=ctx.identity,
        )
        message.replace_header("Date", rendered["date"])
        # A span per send, named by the Message-ID: a duplicate is two spans with one id.
        # Around the try, so a failure is recorded as the redacted error.
        with tracing.smtp_send(
            str(message["Message-ID"]), len(recipients), f"{smtp.host}:{smtp.port}"
        ):
            try:
                refused, reply = await aiosmtplib.send(
                    message,
                    sender=sender,
                    recipients=recipients,
                    hostname=smtp.host,
                    port=smtp.port,
                    username=smtp.username,
                    password=smtp.password,
                    use_tls=smtp.tls == "implicit",
                    # False, not None: aiosmtplib's default upgrades opportunistically, which a
                    # "none" setting must not do (e.g. a local relay with a self-signed cert).
                    start_tls=smtp.tls == "starttls",
                    timeout=smtp.timeout,
                )
            except aiosmtplib.SMTPRecipientsRefused as exc:
                raise _recipients_refused(exc, smtp.password) from None
            except aiosmtplib.SMTPResponseException as exc:
                raise _smtp_reply_error(exc.code, exc.message, smtp.password) from None
            except (TimeoutError, aiosmtplib.SMTPException, OSError) as exc:
                detail = redact(str(exc) or type(exc).__name__, smtp.password)
                raise ConnectionError(
                    f"SMTP {smtp.host}:{smtp.port} unreachable: {detail}"
                ) from None
        # The relay took it: recorded at once, on its own, one copy per accepted recipient
        # (still inside the external call, so nothing stops the attempt before it is kept).
        accepted = [r for r in recipients if r not in refused]
        if accepted:
            await ticket.record(SendEffect(str(message["Message-ID"]), tuple(accepted)))
    return {
        "message_id": str(message["Message-ID"]),
        "accepted": accepted,
        "refused": [f"{rcpt} ({resp.code} {resp.message})" for rcpt, resp in refused.items()],
        "reply": str(reply),
    }


def _smtp_reply_error(code: int, message: str, password: str | None) -> Exception:
    text = redact(f"SMTP server replied {code} {message}".strip(), password)
    if 500 <= code < 600:
        return PermanentJobError(text)
    return RuntimeError(text)


def _recipients_refused(exc: aiosmtplib.SMTPRecipientsRefused, password: str | None) -> Exception:
    replies = "; ".join(f"{r.recipient}: {r.code} {r.message}" for r in exc.recipients)
    text = redact(f"SMTP server refused every recipient: {replies}", password)
    if all(500 <= r.code < 600 for r in exc.recipients):
        return PermanentJobError(text)
    return RuntimeError(text)


def _one_address(value: Any, field: str) -> Address:
    try:
        return parse_address(value)
    except ValueError as exc:
        raise ValidationError(str(exc), field=field) from None


def _address_list(value: Any, field: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise ValidationError("must be an address or a list of addresses", field=field)
    if not items:
        raise ValidationError("must name at least one address", field=field)
    if len(items) > MAX_RECIPIENTS:
        raise ValidationError(f"has {len(items)} addresses; at most {MAX_RECIPIENTS}", field=field)
    seen: dict[str, str] = {}
    for item in items:
        address = _one_address(item, field)
        seen.setdefault(address.addr_spec.lower(), str(address))
    return list(seen.values())


def _subject(value: Any) -> str:
    if not isinstance(value, str):
        raise ValidationError("is required and must be a string", field="subject")
    if has_control(value):
        raise ValidationError("must not contain line breaks or control characters", field="subject")
    if not value.strip():
        raise ValidationError("must not be empty", field="subject")
    if len(value) > MAX_SUBJECT_CHARS:
        raise ValidationError(f"is longer than {MAX_SUBJECT_CHARS} characters", field="subject")
    _utf8_size(value, "subject")
    return value


def _body(value: Any, field: str, *, required: bool) -> str:
    if not isinstance(value, str):
        wanted = "is required and must be a string" if required else "must be a string"
        raise ValidationError(wanted, field=field)
    if "\x00" in value:
        raise ValidationError("must not contain NUL characters", field=field)
    if _utf8_size(value, field) > MAX_BODY_BYTES:
        raise ValidationError(f"is larger than {MAX_BODY_BYTES} bytes", field=field)
    return value


def _utf8_size(value: str, field: str) -> int:
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates: PostgreSQL's jsonb would refuse them
        raise ValidationError("is not valid Unicode text", field=field) from None





EMAIL = JobKind(
    name="email",
    validate=validate_email_payload,
    handler=send_email,
    writes_db=False,
    cancel_safe=False,
    external_effect="only a send in flight (not yet recorded) repeats, with the same Message-ID",
    max_payload_bytes=MAX_EMAIL_PAYLOAD_BYTES,
)
