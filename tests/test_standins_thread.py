"""Issue 22 item 7: the embedded SMTP sink and Stripe endpoint never run on the event loop
of the process's workers (or its dashboard). `local_runtime` runs them on a loop of their
own, in a thread: they answer while the caller's loop is blocked."""

from __future__ import annotations

import json
import smtplib
import threading
import urllib.request
from email.message import EmailMessage

from taskboard.core.standins.runtime import local_runtime


def _message(n: int) -> EmailMessage:
    message = EmailMessage()
    message["From"] = "taskboard@example.com"
    message["To"] = "maya@example.com"
    message["Subject"] = f"Report {n}"
    message["Message-ID"] = f"<big-{n}@test>"
    message.set_content("The report is attached.")
    return message


def _send(host: str, port: int, messages: list[EmailMessage]) -> None:
    with smtplib.SMTP(host, port, timeout=20) as smtp:
        for message in messages:
            smtp.send_message(message)


async def test_the_stand_ins_answer_while_the_callers_loop_is_blocked() -> None:
    async with local_runtime({}) as runtime:
        services = runtime.services
        assert services.smtp is not None and services.stripe.api_base is not None
        smtp, base = services.smtp, services.stripe.api_base
        answers: list[object] = []

        def client() -> None:
            _send(smtp.host, smtp.port, [_message(1)])
            with urllib.request.urlopen(f"{base}/_taskboard/charges", timeout=10) as r:
                answers.append(json.load(r))

        thread = threading.Thread(target=client)
        thread.start()
        # Block this loop outright, as a handler stuck in synchronous code would: at 683562c
        # the sink and the endpoint ran here and could not answer until it was released.
        thread.join(timeout=10)
        assert not thread.is_alive(), "the stand-ins did not answer while this loop was blocked"
        assert len(answers) == 1
        assert runtime.sink is not None
        assert [m.message_id for m in runtime.sink.messages()] == ["<big-1@test>"]
