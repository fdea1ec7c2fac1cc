"""tests/drop_proxy.py does what the dead-connection tests rely on: a dropped flow goes
silent both ways without closing, new connections still work, a blackhole hangs them."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from taskboard.core.engine.connection import answered
from taskboard.core.engine.db_errors import AnswerTimeout

from tests.drop_proxy import DropProxy


async def test_a_dropped_flow_is_silent_and_new_connections_still_work(db_url: str) -> None:
    async with DropProxy.for_url(db_url) as proxy:
        old = await psycopg.AsyncConnection.connect(proxy.url(db_url), autocommit=True)
        try:
            assert (await (await old.execute("SELECT 1")).fetchone()) == (1,)
            assert proxy.drop_flows() == 1
            with pytest.raises(AnswerTimeout):  # closed at its limit, not cancelled
                await answered(old, old.execute("SELECT 2"), 1.0, "a dropped flow")
            assert proxy.open_flows == 1
            new = await psycopg.AsyncConnection.connect(
                proxy.url(db_url), autocommit=True, connect_timeout=5
            )
            async with new:
                assert (await (await new.execute("SELECT 3")).fetchone()) == (3,)
        finally:
            old.pgconn.finish()


async def test_a_dropped_flow_neither_answers_nor_closes(db_url: str) -> None:
    # PostgreSQL answers an SSLRequest with one byte ("N" or "S"); after the drop the same
    # bytes get no answer and no end-of-stream either.
    ssl_request = (8).to_bytes(4, "big") + (80877103).to_bytes(4, "big")
    async with DropProxy.for_url(db_url) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(ssl_request)
        assert await asyncio.wait_for(reader.read(1), 5.0) in (b"N", b"S")
        proxy.drop_flows()
        writer.write(ssl_request)
        await writer.drain()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(1), 1.0)
        assert not reader.at_eof()
        writer.close()


async def test_a_blackholed_proxy_hangs_new_connections_until_it_is_lifted(db_url: str) -> None:
    async with DropProxy.for_url(db_url) as proxy:
        proxy.blackhole(True)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(psycopg.AsyncConnection.connect(proxy.url(db_url)), 1.0)
        proxy.blackhole(False)
        async with await psycopg.AsyncConnection.connect(
            proxy.url(db_url), autocommit=True, connect_timeout=5
        ) as new:
            assert (await (await new.execute("SELECT 1")).fetchone()) == (1,)
