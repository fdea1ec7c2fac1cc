"""`taskboard-tui --serve`: the dashboard in a browser, for the training room.

textual-serve relays a Textual app's screen over a WebSocket, and it runs the app as a
command in a subprocess for each browser session. A session is therefore a whole dashboard:
its own process, its own embedded workers, its own demo story. Two at once would be two
fleets on one database (and with --demo two `worker-a`s, each tab resetting the other's
story), so this server runs one browser session at a time: a reload waits for the
previous session's process to end; another tab is told the board is open elsewhere.

The served command is `taskboard-tui` with the user's own flags minus the serving ones.
It inherits this process's environment, so a database URL given there stays out of the
command line (`ps` shows it to every user of the host).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import json
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
from taskboard.core.fleet import ConfigError, FleetOptions, open_fleet
from textual_serve.app_service import AppService
from textual_serve.server import Server

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
TITLE = "Taskboard"
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


@dataclass
class _Session:
    socket: web.WebSocketResponse
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # the browser side is gone
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # and so is its process


class BoardServer:
    """The web side: textual-serve's page and relay, one session at a time, same-origin."""

    def __init__(self, command: str, host: str) -> None:
        self.command = command
        self.host = host
        # textual-serve's own server, used for its download route and manager only: its
        # index builds URLs from the bind address (useless for 0.0.0.0) and its socket
        # starts a process per tab.
        self._textual = Server(command, title=TITLE)
        self._session: _Session | None = None

    def make_app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(middlewares=[self._guard])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(_PACKAGE / "templates"))
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

    async def _index(self, request: web.Request) -> web.Response:
        base = f"{request.scheme}://{request.host}"
        websocket = ("wss" if request.scheme == "https" else "ws") + f"://{request.host}/ws"
        font_size = request.query.get("fontsize", "16")
        context = {
            "font_size": int(font_size) if font_size.isdigit() else 16,
            "app_websocket_url": websocket,
            "config": {"static": {"url": f"{base}/static/"}},
            "application": {"name": TITLE},
        }
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        # Browsers let any page open a WebSocket to any address; the Origin they send is
        # the only sign the page is this board's own.
        origin = request.headers.get("Origin")
        if origin is not None and origin != f"{request.scheme}://{request.host}":
            raise web.HTTPForbidden(text="the board's socket is for the board's own page\n")
        ws = web.WebSocketResponse(heartbeat=15)
        await ws.prepare(request)
        previous = self._session
        if previous is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(previous.closed.wait(), RELOAD_GRACE_SECONDS)
        if self._session is not previous or (previous and not previous.closed.is_set()):
            await self._refuse(ws)
            return ws
        session = self._session = _Session(ws)
        try:
            if previous is not None:
                await previous.ended.wait()
            await self._run(session, request)
        finally:
            session.closed.set()
            session.ended.set()
            if self._session is session:
                self._session = None
        return ws

    async def _run(self, session: _Session, request: web.Request) -> None:
        ws = session.socket

        async def close() -> None:
            await ws.close()

        service = _Dashboard(
            self.command,
            write_bytes=ws.send_bytes,
            write_str=ws.send_str,
            close=close,
            download_manager=self._textual.download_manager,
        )
        width = _size(request.query.get("width"), 80)
        height = _size(request.query.get("height"), 24)
        print("taskboard-tui: a browser session opened", file=sys.stderr, flush=True)
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

    async def _refuse(self, ws: web.WebSocketResponse) -> None:
        """Say so in the second tab's terminal, and keep it on screen until the tab goes
        (closing would cover it with the page's 'Session ended')."""
        text = (
            "\x1b[2J\x1b[H\x1b[1mThe board is already open in another browser tab.\x1b[0m\r\n\r\n"
            "Each tab is a whole dashboard with its own workers, so one runs at a time.\r\n"
            "Close the other tab, then reload this page.\r\n"
        )
        await ws.send_bytes(text.encode())
        async for _message in ws:
            pass

    async def close_session(self) -> None:
        """End the live session, if any, and wait for its dashboard to stop."""
        session = self._session
        if session is not None:
            await session.socket.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(session.ended.wait(), STOP_TIMEOUT_SECONDS + 5)


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


async def serve(
    options: FleetOptions,
    arguments: Sequence[str],
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    out: TextIO = sys.stdout,
    on_database: object = None,
) -> int:
    """Serve the dashboard until SIGINT or SIGTERM; `arguments` are the flags each
    session's dashboard is started with."""
    board = BoardServer(served_command(arguments), host)
    runner = web.AppRunner(board.make_app(), handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise _bind_error(host, port, exc) from None
        # The database, schema and (with --demo) the demo database are checked once here,
        # so a bad one is a line on this terminal rather than a blank page in the browser.
        # Nothing is kept open: each session's dashboard runs its own stand-ins and
        # counts the effects its own stand-ins see.
        checking = replace(options, workers=0, metrics_port=None)
        async with open_fleet(checking, on_database=on_database):
            pass
        bound = runner.addresses[0][1] if runner.addresses else port
        shown = f"[{host}]" if ":" in host else host
        print(
            f"taskboard-tui: serving the dashboard on http://{shown}:{bound}/ "
            "(one browser session at a time; Ctrl+C stops)",
            file=out,
            flush=True,
        )
        warning = exposure_warning(host)
        if warning is not None:
            print(f"taskboard-tui: warning: {warning}", file=sys.stderr, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await board.close_session()
    finally:
        await runner.cleanup()
    return 0

