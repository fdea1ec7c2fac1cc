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
import secrets
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import TextIO

from aiohttp import web
from taskboard.core.fleet import ConfigError, FleetOptions, open_fleet, room_budget
from taskboard.tui.board_server import (
    BoardServer,
    exposure_warning,
    is_loopback,
    served_command,
)
from taskboard.tui.serve_defaults import DEFAULT_HOST, DEFAULT_PORT, DEFAULT_SESSIONS

__all__ = [
    "DEFAULT_SESSIONS",
    "exposure_warning",
    "is_loopback",
    "serve",
    "served_command",
    "trainee_addresses",
]
_ANY = frozenset({"0.0.0.0", "::", "[::]"})


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
