"""A TCP proxy that adds a set delay each way, for benchmarks with workers "on another host".

`--rtt-ms X` delays every chunk by X/2 ms in each direction, so a round trip through the
proxy costs X ms more than one straight to the server. It is a delay line, not a throttle:
each chunk read from one side is written to the other side at (its arrival + the one-way
delay), in arrival order, however many other chunks are on the way; throughput is not
serialised to one chunk per delay, as a real link of that latency would not be.

It runs as its own process (the harness starts one per round-trip setting, see
`common.Link`), so its CPU is neither the harness's nor a worker's, and is counted apart.
The event loop is asyncio over select(): select's timeout has microsecond resolution,
where epoll (asyncio's default on Linux) rounds every wait up to a whole millisecond and
would turn a 0.25 ms delay into 1 ms. The process also lowers its timer slack from 50 us
to 1 us. select() handles up to ~500 proxied connections (FD_SETSIZE 1024, two each).

    python bench/latency_proxy.py --upstream 127.0.0.1:5432 --rtt-ms 2 [--listen 127.0.0.1:0]

prints `LISTEN <port>` on stdout once it accepts connections; SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import selectors
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

PR_SET_TIMERSLACK = 29  # linux/prctl.h
SCRIPT = str(Path(__file__).resolve())


class DelayLine:
    """One direction of one connection: chunks go out `delay` seconds after they came in.

    One timer per direction at most (armed for the oldest chunk): chunks that are due
    together go out in one write, and order is kept by the queue, not by timer ties.
    A timer fires some tens of microseconds late (more after a longer sleep, when the CPU
    has gone idle); the line keeps a running average of that lateness and arms its timer
    that much early, so chunks leave at their due time on average instead of always after.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float,
                 write: Callable[[bytes], None], close: Callable[[], None]) -> None:
        self._loop = loop
        self._delay = delay
        self._write = write
        self._close = close
        self._queue: deque[tuple[float, bytes | None]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = 0.0
        self._early = 0.0  # running average of how late the timer fires, seconds

    def push(self, data: bytes | None) -> None:
        """Send `data` after the delay; None closes the far side after everything before it."""
        due = self._loop.time() + self._delay
        self._queue.append((due, data))
        if self._timer is None:
            if self._delay <= 0:
                self._flush()
            else:
                self._arm(due)

    def _arm(self, due: float) -> None:
        self._armed_for = due - self._early
        self._timer = self._loop.call_at(self._armed_for, self._flush)

    def _flush(self) -> None:
        now = self._loop.time()
        head = 0.0  # the chunk the timer was armed for goes now, whatever its due time
        if self._timer is not None:
            self._timer = None
            late = now - self._armed_for
            self._early = min(self._delay / 2, max(0.0, 0.9 * self._early + 0.1 * late))
            head = self._queue[0][0] if self._queue else 0.0
        now = max(now, head) + 1e-6
        out: list[bytes] = []
        while self._queue and self._queue[0][0] <= now:
            _, data = self._queue.popleft()
            if data is None:
                if out:
                    self._write(b"".join(out))
                self._queue.clear()
                self._close()
                return
            out.append(data)
        if out:
            self._write(b"".join(out))
        if self._queue:
            self._arm(self._queue[0][0])


class _Side(asyncio.Protocol):
    """One socket of a proxied pair; what it reads goes to its peer through a delay line."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.line: DelayLine | None = None  # toward the peer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def attach(self, peer: _Side) -> None:
        self.peer = peer
        self.line = DelayLine(self.proxy.loop, self.proxy.one_way, peer.write, peer.close)

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        assert self.line is not None
        self.line.push(data)

    def eof_received(self) -> bool | None:
        return False  # close this side; connection_lost passes the close on

    def connection_lost(self, exc: Exception | None) -> None:
        if self.line is not None:
            self.line.push(None)

    # Back-pressure: a peer that cannot take more stops us reading from this side.
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class _ClientSide(_Side):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.pause_reading()  # until the upstream connection exists
        self.proxy.loop.create_task(self._connect())

    async def _connect(self) -> None:
        assert self.transport is not None
        try:
            _, upstream = await self.proxy.loop.create_connection(
                lambda: _Side(self.proxy), self.proxy.upstream_host, self.proxy.upstream_port)
        except OSError:
            self.transport.close()
            return
        assert isinstance(upstream, _Side)
        self.attach(upstream)
        upstream.attach(self)
        self.proxy.connections += 1
        if not self.transport.is_closing():
            self.transport.resume_reading()
        else:
            upstream.close()


class Proxy:
    """A listening delaying proxy on the current (select-based) event loop."""

    def __init__(self, upstream_host: str, upstream_port: int, rtt_ms: float) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.one_way = rtt_ms / 2000
        self.connections = 0
        self.loop = asyncio.get_running_loop()
        self.server: asyncio.Server | None = None

    async def listen(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Start accepting; returns the port."""
        self.server = await self.loop.create_server(lambda: _ClientSide(self), host, port)
        return int(self.server.sockets[0].getsockname()[1])


def new_loop() -> asyncio.AbstractEventLoop:
    """An asyncio loop on select(): microsecond timeouts (see the module docstring)."""
    return asyncio.SelectorEventLoop(selectors.SelectSelector())


def lower_timer_slack() -> None:
    """Ask Linux to wake this process within 1 us of a timeout instead of 50 us."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)


def _serve(args: argparse.Namespace) -> None:
    lower_timer_slack()
    loop = new_loop()
    asyncio.set_event_loop(loop)
    host, _, port = args.upstream.rpartition(":")
    lhost, _, lport = args.listen.rpartition(":")

    async def start() -> int:
        proxy = Proxy(host, int(port), args.rtt_ms)
        return await proxy.listen(lhost, int(lport))

    listening = loop.run_until_complete(start())
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, loop.stop)
    sys.stdout.write(f"LISTEN {listening}\n")
    sys.stdout.flush()
    loop.run_forever()


# --- the harness side ----------------------------------------------------------------------


class ProxyProcess:
    """A proxy process started by the harness: `async with ProxyProcess(...) as p: p.port`."""

    def __init__(self, upstream_host: str, upstream_port: int, rtt_ms: float,
                 log_path: Path | None = None) -> None:
        self.upstream = f"{upstream_host}:{upstream_port}"
        self.rtt_ms = rtt_ms
        self.port = 0
        self.log_path = log_path
        self._proc: asyncio.subprocess.Process | None = None
        self._log: Any = None

    async def __aenter__(self) -> ProxyProcess:
        stderr: Any = asyncio.subprocess.DEVNULL
        if self.log_path is not None:
            self._log = await asyncio.to_thread(open, self.log_path, "wb")
            stderr = self._log
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, SCRIPT, "--upstream", self.upstream,
            "--rtt-ms", f"{self.rtt_ms:g}", stdout=asyncio.subprocess.PIPE, stderr=stderr,
            stdin=asyncio.subprocess.DEVNULL)
        assert self._proc.stdout is not None
        line = await asyncio.wait_for(self._proc.stdout.readline(), 30)
        if not line.startswith(b"LISTEN "):
            await self.__aexit__()
            raise RuntimeError(f"latency proxy did not start (said {line!r})")
        self.port = int(line.split()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._proc.wait(), 5)
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()
        if self._log is not None:
            self._log.close()

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def cpu_seconds(self) -> float:
        """CPU the proxy process has used so far."""
        t = psutil.Process(self.pid).cpu_times()
        return float(t.user + t.system)


def select1_round_trips(url: str, n: int = 200) -> list[float]:
    """Seconds per `SELECT 1` over one connection to `url` (after 20 warm-up queries)."""
    import psycopg

    out = []
    with psycopg.connect(url, autocommit=True) as conn:
        for i in range(n + 20):
            t = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            if i >= 20:
                out.append(time.perf_counter() - t)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="host:port of PostgreSQL (TCP)")
    parser.add_argument("--rtt-ms", type=float, required=True,
                        help="round trip to add, ms (half of it each way)")
    parser.add_argument("--listen", default="127.0.0.1:0", help="host:port (0: any free port)")
    _serve(parser.parse_args())
