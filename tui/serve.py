"""`taskboard-tui --serve`: the dashboard in a browser, for the training room.

textual-serve relays a Textual app's screen over a WebSocket, and it runs the app as a
command in a subprocess for each browser session. A session is therefore a whole dashboard:
its own process, its own embedded workers.

- With --demo every tab tells its own story: its session's dashboard runs in a demo database
  of its own (`--room`, made when it starts and dropped when it ends), with its own workers
  A and B and its own R. At most `--sessions` at once (default 30); a tab beyond them gets
  a page saying the room is full.
- Without --demo one tab controls the board (a reload waits for the previous session's
  process to end and takes control again); every other tab gets the same board read-only:
  no embedded workers of its own, every key that changes anything greyed with the reason.

The served command is `taskboard-tui` with the user's own flags minus the serving ones.
It inherits this process's environment, so a database URL given there stays out of the
command line (`ps` shows it to every user of the host).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import itertools
import json
import secrets
import shlex
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import aiohttp_jinja2
import jinja2
import textual_serve
from aiohttp import WSMsgType, web
from taskboard.core.fleet import (
    ConfigError,
    FleetOptions,
    drop_room_database,
    open_fleet,
    room_budget,
)
from taskboard.tui.page import BOARD, full_page
from textual_serve.app_service import AppService
from textual_serve.server import Server

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
TITLE = "Taskboard"
DEMO_TITLE = "Taskboard · training room"
DEFAULT_SESSIONS = 30
# A reload closes the old page's socket around the time the new page opens its own; this
# long, a live session may take to close before a new one counts as a second tab.
RELOAD_GRACE_SECONDS = 2.0
# A session's dashboard drains its workers when it quits (at most drain + 5 s); past this
# it is killed so the next session can start.
STOP_TIMEOUT_SECONDS = 30.0
_PACKAGE = Path(textual_serve.__file__).parent
_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})
_ANY = frozenset({"0.0.0.0", "::", "[::]"})


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


class _Dashboard(AppService):
    """textual-serve's relay to one session's process, changed in two ways.

    It reads the process's output until the process is gone, also after the browser left:
    textual-serve stops reading at the first frame it cannot send to a closed socket, and
    the session would count as over while its dashboard still drains its workers (a reload
    would then start a second fleet beside it, or a blocked pipe would stop the drain).
    And it closes the browser's socket when the process ends on its own (quit, a start
    that failed), so the page says the session ended instead of waiting on nothing.
    """

    async def run(self) -> None:
        try:
            await super().run()
        finally:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.remote_close()

    async def on_data(self, payload: bytes) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await super().on_data(payload)

    async def on_meta(self, data: bytes) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await super().on_meta(data)

    async def end(self, timeout: float) -> None:
        """Ask the dashboard to quit and wait until its process has exited (its workers
        drained); past `timeout`, kill it."""
        try:
            await asyncio.wait_for(self._quit(), timeout)
        except TimeoutError:
            process = self._process
            if process is not None and process.returncode is None:
                process.kill()
                await process.wait()

    async def _quit(self) -> None:
        await self.stop()
        if self._process is not None:
            await self._process.wait()


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
            return web.Response(
                status=503, text=full_page(self.title, self.cap), content_type="text/html"
            )
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

        service = _Dashboard(
            self._command(session),
            write_bytes=ws.send_bytes,
            write_str=ws.send_str,
            close=close,
            download_manager=self._textual.download_manager,
        )
        width = _size(request.query.get("width"), 80)
        height = _size(request.query.get("height"), 24)
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
            await _relay(ws, service)
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
            f"{self.cap} browser sessions are open, each with its own story: the most this "
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


def _size(text: str | None, default: int) -> int:
    return int(text) if text is not None and text.isdigit() and 0 < int(text) < 1000 else default


async def _relay(ws: web.WebSocketResponse, service: AppService) -> None:
    """The browser's keys, sizes and focus to the dashboard's process (textual-serve's
    protocol: JSON arrays of [type, data])."""
    async for message in ws:
        if message.type != WSMsgType.TEXT:
            continue
        try:
            kind, *rest = json.loads(message.data)
        except (ValueError, TypeError):
            continue
        data = rest[0] if rest else None
        if kind == "stdin" and isinstance(data, str):
            await service.send_bytes(data.encode("utf-8"))
        elif kind == "resize" and isinstance(data, dict):
            await service.set_terminal_size(
                _size(str(data.get("width")), 80), _size(str(data.get("height")), 24)
            )
        elif kind == "ping":
            await ws.send_json(["pong", data])
        elif kind == "blur":
            await service.blur()
        elif kind == "focus":
            await service.focus()


def _bind_error(host: str, port: int, exc: OSError) -> ConfigError:
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(
            f"port {port} on {host} is already in use: stop what listens there or pick "
            "another with --port"
        )
    reason = exc.strerror or str(exc)
    if isinstance(exc, socket.gaierror):
        reason = f"unknown host ({reason})"
    return ConfigError(f"cannot serve on {host} port {port}: {reason}")


def trainee_addresses(host: str, port: int) -> list[str]:
    """The URLs other machines can type for a board bound to `host`: for 0.0.0.0 (or ::)
    this machine's own addresses and name, never the bind address itself."""
    if host.strip("[]") not in {h.strip("[]") for h in _ANY}:
        shown = f"[{host}]" if ":" in host else host
        return [f"http://{shown}:{port}/"]
    found: list[str] = []
    # The address of the default route: what the other machines of the room most likely
    # reach (a UDP "connect" sends nothing).
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        with contextlib.suppress(OSError):
            probe.connect(("192.0.2.1", 9))
            found.append(probe.getsockname()[0])
    name = socket.gethostname()
    with contextlib.suppress(OSError):
        for *_, address in socket.getaddrinfo(name, None, socket.AF_INET):
            found.append(str(address[0]))
    addresses = [a for a in dict.fromkeys(found) if not is_loopback(a)]
    urls = [f"http://{a}:{port}/" for a in addresses]
    if name and not is_loopback(name):
        urls.append(f"http://{name}:{port}/")
    return urls or [f"http://127.0.0.1:{port}/"]


async def serve(
    options: FleetOptions,
    arguments: Sequence[str],
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    out: TextIO = sys.stdout,
    on_database: object = None,
    sessions: int = DEFAULT_SESSIONS,
) -> int:
    """Serve the dashboard until SIGINT or SIGTERM; `arguments` are the flags each
    session's dashboard is started with."""
    # The database, schema and (with --demo) a session's own demo database are checked
    # once here, so a bad one is a line on this terminal rather than a blank page in the
    # browser. Nothing is kept open: each session's dashboard runs its own stand-ins.
    checking = replace(
        options, workers=0, metrics_port=None,
        room=f"0{secrets.token_hex(4)}" if options.demo else None,
    )
    budget: tuple[int, int] | None = None
    board = BoardServer(arguments, host, demo=options.demo, sessions=sessions)
    runner = web.AppRunner(board.make_app(), handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise _bind_error(host, port, exc) from None
        async with open_fleet(checking, on_database=on_database) as opened:
            board.server_url = opened.server_url
            if options.demo:
                budget = await room_budget(opened.server_url)
        bound = runner.addresses[0][1] if runner.addresses else port
        shown = f"[{host}]" if ":" in host else host
        how = (
            f"a story of its own per browser tab, {sessions} at most"
            if options.demo
            else "one tab in control, the others read-only"
        )
        print(
            f"taskboard-tui: serving the dashboard on http://{shown}:{bound}/ "
            f"({how}; Ctrl+C stops)",
            file=out,
            flush=True,
        )
        if host.strip("[]") in {h.strip("[]") for h in _ANY}:
            print(
                "taskboard-tui: trainees can type: " + ", ".join(trainee_addresses(host, bound)),
                file=out,
                flush=True,
            )
        if budget is not None:
            _warn_budget(options, sessions, budget)
        warning = exposure_warning(host)
        if warning is not None:
            print(f"taskboard-tui: warning: {warning}", file=sys.stderr, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await board.close_sessions()
    finally:
        await runner.cleanup()
    return 0


def _warn_budget(options: FleetOptions, sessions: int, budget: tuple[int, int]) -> None:
    """Say so when the server cannot hold `sessions` stories at once (each needs its
    workers' pools, the board's link and the stand-ins' registry)."""
    free, total = budget
    each = options.workers * options.settings.pool_size + 3
    if sessions * each > free:
        print(
            f"taskboard-tui: warning: {sessions} demo sessions need about {sessions * each} "
            f"database connections and the server has {free} free (max_connections {total}): "
            f"about {max(free // each, 0)} stories fit; lower --sessions or raise "
            "max_connections",
            file=sys.stderr,
            flush=True,
        )
