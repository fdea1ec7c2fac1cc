"""A TCP proxy that can make connections die silently, for tests of dead-connection handling.

    async with DropProxy(upstream_host, upstream_port) as proxy:
        url = proxy.url(db_url)   # the same database, reached through the proxy
        ...                       # start workers on `url`
        proxy.drop_flows()        # every open connection goes silent, both ways
        proxy.blackhole(True)     # new connections hang too (a frozen primary)
        proxy.blackhole(False)    # new connections work again
        proxy.drop_on(b"SELECT 1")  # a flow goes silent when its client sends this
        proxy.drop_on(b"SELECT 1", once=True)  # ... the first such flow only

`DropProxy.for_url(db_url)` takes the upstream from a PostgreSQL URL. The upstream may be a
TCP host or, as with the embedded test server, a Unix socket directory (a host starting
with "/"; the socket is `<dir>/.s.PGSQL.<port>`). Clients always reach the proxy over TCP on
127.0.0.1.

A dropped flow stops forwarding in both directions without FIN or RST: both sockets stay
open and whatever arrives is read and thrown away, so neither the client nor the server
learns anything. That is what a NAT or firewall that forgets a flow, a cut cable or a
frozen PgBouncer looks like from the client's side, with one difference worth knowing:
the client's kernel talks to this proxy's kernel on loopback, so its writes are still
acknowledged and TCP keepalive probes are still answered. Only application-level deadlines
(a statement timeout that closes the socket, a pool check with a timeout) notice a dropped
flow here; keepalives and `tcp_user_timeout` do not, and tests must not claim they do.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from psycopg.conninfo import conninfo_to_dict

_CHUNK = 65536


class _Flow:
    """One client connection and its upstream connection; `dropped` silences it for good."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.dropped = False
        self.tasks: list[asyncio.Task[None]] = []

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for writer in (self.client, self.upstream):
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.transport.abort()


class DropProxy:
    """An in-process asyncio TCP proxy on 127.0.0.1 whose flows can be silently dropped."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = int(upstream_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._flows: set[_Flow] = set()
        self._blackholed = False
        self._drop_on: bytes | None = None
        self._drop_once = False
        self.accepted = 0

    @classmethod
    def for_url(cls, db_url: str) -> DropProxy:
        """A proxy in front of the server `db_url` names (TCP host or Unix socket dir)."""
        params = conninfo_to_dict(db_url)
        host = str(params.get("host") or "localhost").split(",")[0]
        port = int(str(params.get("port") or 5432).split(",")[0])
        return cls(host, port)

    async def __aenter__(self) -> DropProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop listening and abort every flow (dropped or not)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        flows, self._flows = list(self._flows), set()
        for flow in flows:
            flow.close()
        await asyncio.sleep(0)

    def url(self, db_url: str) -> str:
        """`db_url` with its host and port replaced by this proxy's (other settings kept)."""
        parts = urlsplit(db_url)
        query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("host", "port", "hostaddr")]
        userinfo, _, _ = parts.netloc.rpartition("@")
        netloc = f"{userinfo}@127.0.0.1:{self.port}" if userinfo else f"127.0.0.1:{self.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query), parts.fragment))

    @property
    def open_flows(self) -> int:
        """Flows currently open (forwarding or silenced)."""
        return len(self._flows)

    @property
    def live_flows(self) -> int:
        """Flows that still forward."""
        return sum(1 for f in self._flows if not f.dropped)

    def drop_flows(self) -> int:
        """Silence every existing flow in both directions (no FIN, no RST); returns how many.
        New connections are unaffected (unless the proxy is blackholed)."""
        live = [f for f in self._flows if not f.dropped]
        for flow in live:
            flow.dropped = True
        return len(live)

    def blackhole(self, on: bool) -> None:
        """While on, new connections are accepted but silenced from the start (they hang).
        Turning it off does not revive them; it only lets later connections through."""
        self._blackholed = on

    def drop_on(self, pattern: bytes | None, *, once: bool = False) -> None:
        """From now on, a flow whose client sends `pattern` (in one read) goes silent before
        it is forwarded: a server that stops answering at a chosen statement. `once`: only
        the first such flow (a flow a NAT forgot; the next connection works)."""
        self._drop_on = pattern
        self._drop_once = once

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        flow = _Flow(writer)
        self._flows.add(flow)
        if self._blackholed:
            flow.dropped = True
            flow.tasks = [asyncio.create_task(self._swallow(reader))]
            return
        try:
            if self.upstream_host.startswith("/"):
                path = f"{self.upstream_host}/.s.PGSQL.{self.upstream_port}"
                up_reader, up_writer = await asyncio.open_unix_connection(path)
            else:
                up_reader, up_writer = await asyncio.open_connection(
                    self.upstream_host, self.upstream_port
                )
        except OSError:
            self._flows.discard(flow)
            writer.transport.abort()
            return
        flow.upstream = up_writer
        flow.tasks = [
            asyncio.create_task(self._pump(flow, reader, up_writer, from_client=True)),
            asyncio.create_task(self._pump(flow, up_reader, writer, from_client=False)),
        ]

    async def _swallow(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            while await reader.read(_CHUNK):
                pass

    async def _pump(
        self,
        flow: _Flow,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        *,
        from_client: bool,
    ) -> None:
        try:
            while True:
                data = await src.read(_CHUNK)
                if not data:
                    break
                if from_client and self._drop_on is not None and self._drop_on in data:
                    flow.dropped = True
                    if self._drop_once:
                        self._drop_on = None
                if flow.dropped:
                    continue  # swallowed: the other side hears nothing
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            return
        # The source closed. A live flow passes the close on; a dropped one keeps the other
        # side open and silent (a partition does not deliver FIN), except that a client which
        # hung up itself is let go so the test process does not keep its socket forever.
        if not flow.dropped:
            self._flows.discard(flow)
            flow.close()
        elif from_client:
            with contextlib.suppress(Exception):
                flow.client.transport.abort()
