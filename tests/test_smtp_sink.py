"""The embedded SMTP sink: what it keeps, and the faults it can play."""

from __future__ import annotations

import asyncio
from email.message import EmailMessage

import aiosmtplib
import pytest
from taskboard.core.standins.smtp_sink import SmtpSink


def _message(message_id: str = "<m1@test>", to: str = "maya@example.com") -> EmailMessage:
    message = EmailMessage()
    message["From"] = "taskboard@example.com"
    message["To"] = to
    message["Subject"] = "Your receipt"
    message["Message-ID"] = message_id
    message["X-Taskboard-Job"] = "42"
    message.set_content("Thanks!")
    return message


async def _send(
    sink: SmtpSink,
    message: EmailMessage,
    username: str | None = None,
    password: str | None = None,
) -> None:
    await aiosmtplib.send(
        message,
        hostname=sink.host,
        port=sink.port,
        username=username,
        password=password,
        start_tls=False,
        timeout=2,
    )


async def test_keeps_recipients_subject_message_id_and_headers(sink: SmtpSink) -> None:
    message = _message()
    message["Cc"] = "ops@example.com"
    await _send(sink, message)

    [received] = sink.messages()
    assert received.recipients == ("maya@example.com", "ops@example.com")
    assert received.mail_from == "taskboard@example.com"
    assert received.subject == "Your receipt"
    assert received.message_id == "<m1@test>"
    assert received.header("x-taskboard-job") == "42"
    assert received.received_at.tzinfo is not None
    assert sink.port > 0


async def test_counts_messages_per_message_id_and_flags_duplicates(sink: SmtpSink) -> None:
    await _send(sink, _message("<dup@test>"))
    await _send(sink, _message("<dup@test>"))
    await _send(sink, _message("<once@test>", to="ops@example.com"))

    assert sink.count_by_message_id() == {"<dup@test>": 2, "<once@test>": 1}
    rows = {row.message_id: row for row in sink.tally()}
    assert rows["<dup@test>"].count == 2
    assert rows["<once@test>"].recipient == "ops@example.com"
    assert sink.effects_emails() == sink.tally()  # the former name still answers


async def test_fail_next_rejects_that_many_messages_then_accepts(sink: SmtpSink) -> None:
    sink.fail_next(1, code=451, message="4.7.1 Greylisted, try later")
    with pytest.raises(aiosmtplib.SMTPDataError) as temporary:
        await _send(sink, _message())
    assert temporary.value.code == 451
    assert "Greylisted" in temporary.value.message

    sink.fail_next(1, code=550, message="5.1.1 Mailbox unavailable")
    with pytest.raises(aiosmtplib.SMTPDataError) as permanent:
        await _send(sink, _message())
    assert permanent.value.code == 550

    await _send(sink, _message())
    assert len(sink.messages()) == 1
    assert sink.rejected == 2


async def test_fail_next_refuses_codes_that_are_not_failures(sink: SmtpSink) -> None:
    with pytest.raises(ValueError):
        sink.fail_next(1, code=250)


async def test_latency_delays_the_reply(sink: SmtpSink) -> None:
    sink.set_latency(0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await _send(sink, _message())
    assert loop.time() - started >= 0.2


async def test_down_drops_connections_until_it_comes_back(sink: SmtpSink) -> None:
    sink.down = True
    with pytest.raises((aiosmtplib.SMTPConnectError, aiosmtplib.SMTPServerDisconnected)):
        await _send(sink, _message())
    sink.down = False
    await _send(sink, _message())
    assert len(sink.messages()) == 1


async def test_wait_for_returns_once_the_condition_holds(sink: SmtpSink) -> None:
    waiter = asyncio.create_task(sink.wait_for(lambda s: len(s.messages()) >= 2))
    await _send(sink, _message("<a@test>"))
    await asyncio.sleep(0)
    assert not waiter.done()
    await _send(sink, _message("<b@test>"))
    async with asyncio.timeout(2):
        await waiter


async def test_with_credentials_mail_needs_the_right_login() -> None:
    async with SmtpSink(username="maya", password="hunter2") as sink:
        with pytest.raises(aiosmtplib.SMTPSenderRefused) as anonymous:
            await _send(sink, _message())
        assert anonymous.value.code == 530
        with pytest.raises(aiosmtplib.SMTPAuthenticationError):
            await _send(sink, _message(), username="maya", password="wrong")
        await _send(sink, _message(), username="maya", password="hunter2")
        assert len(sink.messages()) == 1
        assert "hunter2" not in repr(sink.settings())


async def test_stop_closes_the_port() -> None:
    sink = await SmtpSink().start()
    port = sink.port
    await sink.stop()
    with pytest.raises(aiosmtplib.SMTPConnectError):
        await aiosmtplib.send(_message(), hostname="127.0.0.1", port=port, timeout=1)
