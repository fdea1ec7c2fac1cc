"""textual-serve's relay between a browser tab and its session's dashboard process, kept
going until the process is gone, and the tab's messages (keys, sizes, focus) handed on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys

from aiohttp import WSMsgType, web
from textual_serve.app_service import AppService

# How long a session's process that has closed its stdout is given to close its stderr
# (what it wrote by then is printed either way).
STDERR_SECONDS = 1.0


class Dashboard(AppService):
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
            await self._print_rest_of_stderr()
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.remote_close()

    async def _print_rest_of_stderr(self) -> None:
        """What the process wrote to stderr that textual-serve did not print. It stops
        reading stderr as soon as stdout ends, so a dashboard that failed to start and exited
        could lose its reason (a busy metrics port, seen under load); and it writes what it
        read to stdout unflushed, which a pipe keeps until exit."""
        process = self._process
        stream = process.stderr if process is not None else None
        rest = bytearray()
        if stream is not None:
            # One deadline in all: a child that kept the pipe (and writes to it) ends nothing.
            with contextlib.suppress(TimeoutError, OSError):
                async with asyncio.timeout(STDERR_SECONDS):
                    while chunk := await stream.read(65536):
                        rest += chunk
        if rest:
            sys.stdout.write(rest.decode("utf-8", "replace"))
        sys.stdout.flush()

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


def size(text: str | None, default: int) -> int:
    return int(text) if text is not None and text.isdigit() and 0 < int(text) < 1000 else default


async def relay(ws: web.WebSocketResponse, service: AppService) -> None:
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
                size(str(data.get("width")), 80), size(str(data.get("height")), 24)
            )
        elif kind == "ping":
            await ws.send_json(["pong", data])
        elif kind == "blur":
            await service.blur()
        elif kind == "focus":
            await service.focus()
