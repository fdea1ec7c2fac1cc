"""Shared fixtures: a real PostgreSQL (embedded by default) and a fresh database per test.

Set `TASKBOARD_TEST_DATABASE_URL` to run against another server; the role needs CREATEDB.
"""

from __future__ import annotations

import asyncio
import os
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from taskboard.core.engine.schema import migrate
from taskboard.core.standins.smtp_sink import SmtpSink
from taskboard.core.standins.stripe_endpoint import StripeEndpoint

from tests.pgbouncer import pgbouncer_session, pgbouncer_transaction  # noqa: F401 (fixtures)

TEMPLATE_DB = "taskboard_test_template"


def _with_dbname(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


@pytest.fixture(scope="session")
def pg_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of the server the tests use (its maintenance database)."""
    url = os.environ.get("TASKBOARD_TEST_DATABASE_URL")
    if url:
        yield url
        return
    from taskboard.core.runtime.embedded import EmbeddedPostgres

    configured = os.environ.get("TASKBOARD_TEST_PGDATA")
    data_dir = Path(configured) if configured else tmp_path_factory.mktemp("pg") / "data"
    server = EmbeddedPostgres(data_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        uri = server.start()
    if _raise_connection_limit(uri):
        server.restart()
    try:
        yield uri
    finally:
        server.stop()


def _raise_connection_limit(uri: str) -> bool:
    """Room for several worker processes with pools of 10 plus the tests' own connections."""
    with psycopg.connect(uri, autocommit=True) as conn:
        row = conn.execute("SHOW max_connections").fetchone()
        assert row is not None
        if int(row[0]) >= 200:
            return False
        conn.execute("ALTER SYSTEM SET max_connections = 300")
        return True


@pytest.fixture(scope="session")
def template_db(pg_server_url: str) -> str:
    """A database with the schema applied, cloned for each test."""
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{TEMPLATE_DB}"')
    url = _with_dbname(pg_server_url, TEMPLATE_DB)

    async def apply() -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        async with conn:
            await migrate(conn)

    asyncio.run(apply())
    return TEMPLATE_DB


@pytest.fixture
def make_db(pg_server_url: str, template_db: str) -> Iterator[Callable[[], str]]:
    """Create fresh migrated databases; returns a factory of URLs. Dropped after the test."""
    created: list[str] = []

    def make() -> str:
        name = f"tb_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
        created.append(name)
        return _with_dbname(pg_server_url, name)

    yield make
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        for name in created:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db_url(make_db: Callable[[], str]) -> str:
    """A fresh, migrated database for this test."""
    return make_db()


@pytest.fixture
async def conn(db_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """An autocommit connection to the test's database."""
    c = await psycopg.AsyncConnection.connect(db_url, autocommit=True)
    try:
        yield c
    finally:
        await c.close()


async def wait_for(
    predicate: Callable[[], Any], *, timeout: float = 10.0, what: str = "condition",
    step: float = 0.02,
) -> Any:
    """Poll `predicate` (sync or async) until truthy; fail with `what` after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(step)


@pytest.fixture
async def sink() -> AsyncIterator[SmtpSink]:
    """The SMTP sink on loopback, a free port."""
    async with SmtpSink() as running:
        yield running


@pytest.fixture
async def endpoint() -> AsyncIterator[StripeEndpoint]:
    """The local Stripe-compatible endpoint, a free port."""
    async with StripeEndpoint() as running:
        yield running
