"""The web side of `taskboard-tui --serve`: the board's page, textual-serve's relay to each
session's dashboard process, and who gets which session (see `serve` for the rules: a story
per tab with --demo; one tab in control and the others read-only without)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import secrets
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
import textual_serve
from aiohttp import web
from taskboard.core.fleet import drop_room_database
from taskboard.tui.page import BOARD, full_page
from taskboard.tui.relay import Dashboard, relay, size
from taskboard.tui.serve_defaults import DEFAULT_SESSIONS
from textual_serve.server import Server

TITLE = "Taskboard"
DEMO_TITLE = "Taskboard · training room"
# A reload closes the old page's socket around the time the new page opens its own; this
# long, a live session may take to close before a new one counts as a second tab.
RELOAD_GRACE_SECONDS = 2.0
# A session's dashboard drains its workers when it quits (at most drain + 5 s); past this
# it is killed so the next session can start.
STOP_TIMEOUT_SECONDS = 30.0
_PACKAGE = Path(textual_serve.__file__).parent
_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str) -> str | None:
    """What serving on `host` exposes, when it is more than this machine."""
    if is_loopback(host):
        return None
    return (
        f"{host} is reachable from other machines: anyone who can open this address "
        "controls the workers (pause, crash, drain, retry, cancel); there is no login"
    )


def served_command(arguments: Sequence[str]) -> str:
    """The shell command textual-serve runs per session: this interpreter's taskboard-tui
    (the console script may not be on the shell's PATH), exec'd so no shell stays between."""
    argv = [sys.executable, "-m", "taskboard.tui.main", *arguments]
    return "exec " + shlex.join(argv)


@dataclass(eq=False)
class _Session:
    socket: web.WebSocketResponse
    room: str | None = None  # with --demo: the session's own demo database
    watching: bool = False  # a read-only tab of the plain board
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # the browser side is gone
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # and so is its process


class BoardServer:
    """The web side: the board's page and textual-serve's relay, same-origin. With `demo`,
    a story per session, `sessions` at most; without, one session in control and the
    others read-only."""

    def __init__(
        self,
        arguments: Sequence[str],
        host: str,
        *,
        demo: bool = False,
        sessions: int = DEFAULT_SESSIONS,
        server_url: str | None = None,
    ) -> None:
        self.arguments = list(arguments)
        self.host = host
        self.demo = demo
        self.cap = sessions
        self.title = DEMO_TITLE if demo else TITLE
        self.server_url = server_url
        # textual-serve's own server, used for its download route and manager only: its
        # index builds URLs from the bind address (useless for 0.0.0.0) and its socket
        # starts a process per tab with one command for all.
        self._textual = Server(served_command(arguments), title=TITLE)
        self._sessions: set[_Session] = set()
        self._control: _Session | None = None
        self._numbers = itertools.count(1)

    @property
    def sessions(self) -> int:
        """Browser sessions open now (or still stopping)."""
        return len(self._sessions)

    def make_app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(middlewares=[self._guard])
        aiohttp_jinja2.setup(app, loader=jinja2.DictLoader({"board.html": BOARD}))
        app.add_routes(
            [
                web.get("/", self._index, name="index"),
                web.get("/ws", self._websocket, name="websocket"),
                web.get("/download/{key}", self._textual.handle_download, name="download"),
                web.static("/static", _PACKAGE / "static", name="static"),
            ]
        )
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        # On loopback, a page of any site the trainer visits could reach the board through
        # a name that resolves to 127.0.0.1 (DNS rebinding): only loopback names are served.
        name = request.url.host or ""
        if is_loopback(self.host) and not (is_loopback(name) or name == self.host):
            raise web.HTTPMisdirectedRequest(text="this board answers on loopback names only\n")
        response: web.StreamResponse = await handler(request)
        return response

    def _full(self) -> bool:
        return len(self._sessions) >= self.cap

    async def _index(self, request: web.Request) -> web.Response:
        if self._full():
            page = full_page(self.title, self.cap, demo=self.demo)
            return web.Response(status=503, text=page, content_type="text/html")
        base = f"{request.scheme}://{request.host}"
        websocket = ("wss" if request.scheme == "https" else "ws") + f"://{request.host}/ws"
        font_size = request.query.get("fontsize", "16")
        context = {
            "font_size": int(font_size) if font_size.isdigit() else 16,
            "websocket": websocket,
            "static": f"{base}/static/",
            "title": self.title,
        }
        return aiohttp_jinja2.render_template("board.html", request, context)

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        # Browsers let any page open a WebSocket to any address; the Origin they send is
        # the only sign the page is this board's own.
        origin = request.headers.get("Origin")
        if origin is not None and origin != f"{request.scheme}://{request.host}":
            raise web.HTTPForbidden(text="the board's socket is for the board's own page\n")
        ws = web.WebSocketResponse(heartbeat=15)
        await ws.prepare(request)
        if self._full():
            await self._refuse(ws)
            return ws
        if self.demo:
            # Digits, then random hex: unique on the server even beside another room's.
            session = _Session(ws, room=f"{next(self._numbers)}{secrets.token_hex(4)}")
            self._sessions.add(session)
        else:
            session = await self._plain_session(ws)
        try:
            await self._run(session, request)
        finally:
            session.closed.set()
            session.ended.set()
            self._sessions.discard(session)
            if self._control is session:
                self._control = None
            if session.room is not None:
                await self._drop_room(session.room)
        return ws

    async def _plain_session(self, ws: web.WebSocketResponse) -> _Session:
        """The tab in control, if no other tab has it (a reload: once the old one ended),
        else a read-only one."""
        previous = self._control
        if previous is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(previous.closed.wait(), RELOAD_GRACE_SECONDS)
        if self._control is previous and (previous is None or previous.closed.is_set()):
            session = self._control = _Session(ws)
            self._sessions.add(session)
            if previous is not None:
                await previous.ended.wait()
            return session
        session = _Session(ws, watching=True)
        self._sessions.add(session)
        return session

    def _command(self, session: _Session) -> str:
        extra = ["--room", session.room] if session.room else []
        extra += ["--read-only"] if session.watching else []
        return served_command([*self.arguments, *extra])

    async def _run(self, session: _Session, request: web.Request) -> None:
        ws = session.socket

        async def close() -> None:
            await ws.close()

        service = Dashboard(
            self._command(session),
            write_bytes=ws.send_bytes,
            write_str=ws.send_str,
            close=close,
            download_manager=self._textual.download_manager,
        )
        width = size(request.query.get("width"), 80)
        height = size(request.query.get("height"), 24)
        what = "a browser session"
        if session.room:
            what += f" (its own demo story, {len(self._sessions)} of {self.cap} open)"
        elif session.watching:
            what += " (read-only: another tab controls the board)"
        print(f"taskboard-tui: {what} opened", file=sys.stderr, flush=True)
        try:
            await service.start(width, height)
        except OSError as exc:
            print(f"taskboard-tui: the session's dashboard could not start: {exc}",
                  file=sys.stderr, flush=True)
            await ws.close()
            return
        try:
            await relay(ws, service)
        finally:
            session.closed.set()
            await service.end(STOP_TIMEOUT_SECONDS)
            print("taskboard-tui: the browser session ended", file=sys.stderr, flush=True)

    async def _drop_room(self, room: str) -> None:
        """The session's dashboard drops its demo database as it quits; one killed before
        it could is dropped here."""
        if self.server_url is None:
            return
        try:
            await drop_room_database(self.server_url, room)
        except Exception as exc:  # the server may have stopped with its last session
            print(f"taskboard-tui: the demo database of session {room} was not dropped: "
                  f"{type(exc).__name__}", file=sys.stderr, flush=True)

    async def _refuse(self, ws: web.WebSocketResponse) -> None:
        """Say so in the tab's terminal, and keep it on screen until the tab goes (closing
        would cover it with the page's 'Session ended')."""
        text = (
            "\x1b[2J\x1b[H\x1b[1mThe training room is full.\x1b[0m\r\n\r\n"
            f"{self.cap} browser sessions are open"
            + (", each with its own story" if self.demo else "")
            + ": the most this "
            "board serves at once.\r\nReload this page once someone closes their tab.\r\n"
        )
        await ws.send_bytes(text.encode())
        async for _message in ws:
            pass

    async def close_sessions(self) -> None:
        """End every live session and wait for their dashboards to stop."""
        sessions = list(self._sessions)
        for session in sessions:
            await session.socket.close()
        waits = [session.ended.wait() for session in sessions]
        if waits:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waits), STOP_TIMEOUT_SECONDS + 5)
