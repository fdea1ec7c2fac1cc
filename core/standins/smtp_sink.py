"""An in-process SMTP server on loopback that keeps what it receives.

It stands in for a real mail server when nothing is configured, so the whole story runs on
one machine, and it is what tests and the training scenario look at: how many messages
arrived per `Message-ID` shows the duplicates a resumed stale worker sends. Faults can be
injected (temporary or permanent rejections, latency, the server going down).

The server runs in the event loop that calls `start()`; the reading methods may also be
called from other threads (a dashboard collector thread, for instance).
"""

from __future__ import annotations

import asyncio
import hmac
import threading
import weakref
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from taskboard.core.base.services import SmtpSettings
from taskboard.core.standins.smtp_records import (
    MessageTally,
    ReceivedMessage,
    record_message,
    tally_by_message_id,
)

SINK_HOSTNAME = "taskboard-sink.local"


@dataclass(frozen=True)
class _Rejection:
    code: int
    message: str


class _Refuse(asyncio.Protocol):
    """What a 'down' server does with a new connection: drop it before the greeting."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        _abort(transport)


class SmtpSink:
    """An aiosmtpd server on 127.0.0.1 (a free port by default) that records messages.

    Use `async with SmtpSink() as sink:` or `await sink.start()` / `await sink.stop()`.
    With `username` and `password`, clients must authenticate (over plain text: loopback).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        username: str | None = None,
        password: str | None = None,
        max_messages: int = 10_000,
    ) -> None:
        self._bind = (host, port)
        self._credentials = (username, password) if username is not None else None
        self._lock = threading.Lock()
        self._messages: deque[ReceivedMessage] = deque(maxlen=max_messages)
        self._rejections: deque[_Rejection] = deque()
        self._rejected = 0
        self._latency = 0.0
        self._down = False
        self._server: asyncio.Server | None = None
        self._port = 0
        self._sessions: weakref.WeakSet[SMTP] = weakref.WeakSet()
        # When each open transaction's MAIL FROM arrived; aiosmtpd makes a new envelope
        # per transaction, so the entry goes with it.
        self._started: weakref.WeakKeyDictionary[Envelope, datetime] = weakref.WeakKeyDictionary()
        self._changed = asyncio.Event()

    async def start(self) -> SmtpSink:
        """Start listening; returns self."""
        if self._server is not None:
            return self
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._protocol, *self._bind)
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """Stop listening and drop open sessions."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        self._drop_sessions()
        await server.wait_closed()

    async def __aenter__(self) -> SmtpSink:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def host(self) -> str:
        """The address the sink listens on."""
        return self._bind[0]

    @property
    def port(self) -> int:
        """The port the sink listens on (0 before `start()`)."""
        return self._port

    def settings(self) -> SmtpSettings:
        """SMTP settings that send to this sink."""
        username, password = self._credentials or (None, None)
        return SmtpSettings(
            host=self.host, port=self.port, username=username, password=password, timeout=10.0
        )

    # -- fault injection ---------------------------------------------------------------

    def fail_next(
        self, n: int = 1, *, code: int = 451, message: str = "4.3.0 Try again later"
    ) -> None:
        """Reject the next `n` messages at the end of DATA with `code message`.

        4xx codes are temporary (the sender should retry), 5xx permanent.
        """
        if not 400 <= code < 600:
            raise ValueError("code must be a 4xx or 5xx SMTP reply code")
        if any(ch in message for ch in "\r\n"):
            raise ValueError("message must be one line")
        with self._lock:
            self._rejections.extend(_Rejection(code, message) for _ in range(n))

    def set_latency(self, seconds: float) -> None:
        """Wait this long before answering each DATA, like a slow or distant server."""
        if seconds < 0:
            raise ValueError("latency must not be negative")
        self._latency = seconds

    @property
    def down(self) -> bool:
        """While down, connections are dropped before the greeting, as a crashed server's."""
        return self._down

    @down.setter
    def down(self, value: bool) -> None:
        self._down = value
        if value:
            self._drop_sessions()

    def clear(self) -> None:
        """Forget received messages, pending rejections and counters."""
        with self._lock:
            self._messages.clear()
            self._rejections.clear()
            self._rejected = 0

    # -- what was received -------------------------------------------------------------

    def messages(self) -> tuple[ReceivedMessage, ...]:
        """Messages accepted so far, oldest first."""
        with self._lock:
            return tuple(self._messages)

    @property
    def rejected(self) -> int:
        """How many messages were refused by `fail_next`."""
        return self._rejected

    def count_by_message_id(self) -> dict[str, int]:
        """How many accepted messages carry each `Message-ID` (more than 1: a duplicate)."""
        with self._lock:
            return dict(Counter(m.message_id for m in self._messages if m.message_id))

    def tally(self) -> tuple[MessageTally, ...]:
        """One row per `Message-ID`, the latest receipt first (a count above 1: a duplicate)."""
        return tally_by_message_id(self.messages())

    def effects_emails(self) -> tuple[MessageTally, ...]:
        """The former name of `tally()`, kept for existing callers."""
        return self.tally()

    async def wait_for(self, predicate: Callable[[SmtpSink], bool]) -> None:
        """Wait until `predicate(sink)` holds, re-checking as messages arrive.

        Give it a deadline: `async with asyncio.timeout(2): await sink.wait_for(...)`.
        """
        while not predicate(self):
            self._changed.clear()
            await self._changed.wait()

    # -- server side -------------------------------------------------------------------

    def _protocol(self) -> asyncio.Protocol:
        if self._down:
            return _Refuse()
        kwargs: dict[str, Any] = {}
        if self._credentials is not None:
            # AUTH is enforced in handle_MAIL rather than with auth_required, which makes
            # aiosmtpd warn on every session about AUTH without TLS (fine on loopback).
            kwargs = {"auth_require_tls": False, "authenticator": self._authenticate}
        session = SMTP(
            _Handler(self),
            hostname=SINK_HOSTNAME,
            ident="Taskboard SMTP sink",
            enable_SMTPUTF8=True,
            timeout=30,
            loop=asyncio.get_running_loop(),
            **kwargs,
        )
        self._sessions.add(session)
        return session

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        assert self._credentials is not None
        username, password = self._credentials
        ok = (
            isinstance(data, LoginPassword)
            and hmac.compare_digest(data.login, username.encode())
            and hmac.compare_digest(data.password, (password or "").encode())
        )
        return AuthResult(success=ok, handled=False)

    def _drop_sessions(self) -> None:
        for session in list(self._sessions):
            if session.transport is not None:
                _abort(session.transport)

    async def _on_data(self, envelope: Envelope) -> str:
        if self._latency:
            await asyncio.sleep(self._latency)
        with self._lock:
            rejection = self._rejections.popleft() if self._rejections else None
            if rejection is not None:
                self._rejected += 1
        if rejection is not None:
            return f"{rejection.code} {rejection.message}"
        message = record_message(envelope, self._started.pop(envelope, None))
        with self._lock:
            self._messages.append(message)
        self._changed.set()
        return "250 2.0.0 OK: queued"


class _Handler:
    """aiosmtpd's hooks: `handle_MAIL` per envelope, `handle_DATA` per message."""

    def __init__(self, sink: SmtpSink) -> None:
        self._sink = sink

    async def handle_MAIL(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        mail_options: list[str],
    ) -> str:
        if self._sink._credentials is not None and not session.authenticated:
            return "530 5.7.0 Authentication required"
        self._sink._started[envelope] = datetime.now(UTC)
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        return await self._sink._on_data(envelope)


def _abort(transport: asyncio.BaseTransport) -> None:
    # abort(), not close(): a crashed server does not finish pending writes.
    if isinstance(transport, asyncio.Transport):
        transport.abort()
    else:
        transport.close()


__all__ = ["SINK_HOSTNAME", "MessageTally", "ReceivedMessage", "SmtpSink"]
