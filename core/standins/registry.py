"""Where the embedded stand-ins of one host are registered: `taskboard_standins`.

Every Taskboard process on a host that uses one database sends to the same SMTP sink and
Stripe endpoint, so duplicates and replays are judged across processes as a real server
would judge them. The first process registers the address of its stand-in; the others find
it there.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import AsyncConnection
from taskboard.core.base.errors import DatabaseUnavailable
from taskboard.core.runtime.db import connect
from taskboard.core.sql.admin import (
    FIND_STANDIN,
    FORGET_STANDIN,
    REGISTER_STANDIN,
    STANDINS_LOCK,
    STANDINS_LOCK_TIMEOUT,
)

log = logging.getLogger("taskboard.standins")

class RegistryUnavailable(Exception):
    """The registry could not be read or written; `permanent` when retrying cannot help
    (the table does not exist, or the role has no privilege on it)."""

    def __init__(self, reason: str, *, permanent: bool) -> None:
        super().__init__(reason)
        self.permanent = permanent


@dataclass(frozen=True)
class Registration:
    """A stand-in some process registered for this host."""

    name: str
    address: str
    pid: int


class RegistrySession:
    """One connection holding the registry lock; see `StandinRegistry.session`."""

    def __init__(self, conn: AsyncConnection[Any], host: str) -> None:
        self._conn = conn
        self._host = host

    async def find(self, name: str) -> Registration | None:
        """The stand-in registered under `name` for this host, if any."""
        async with _translated():
            cur = await self._conn.execute(FIND_STANDIN, {"name": name, "host": self._host})
            row = await cur.fetchone()
        return Registration(name, str(row[0]), int(row[1])) if row is not None else None

    async def register(self, name: str, address: str) -> None:
        """Register this process's stand-in; replaces whatever was registered."""
        params = {"name": name, "host": self._host, "address": address, "pid": os.getpid()}
        async with _translated():
            await self._conn.execute(REGISTER_STANDIN, params)


class StandinRegistry:
    """The registry in the database at `database_url`, for this host."""

    def __init__(self, database_url: str, *, host: str | None = None) -> None:
        self._url = database_url
        self.host = host or socket.gethostname()

    @asynccontextmanager
    async def session(self) -> AsyncIterator[RegistrySession]:
        """A connection holding the registry lock for the block (closing it releases it)."""
        async with _translated():
            conn = await connect(self._url)
        try:
            async with _translated():
                await conn.execute(STANDINS_LOCK_TIMEOUT)
                await conn.execute(STANDINS_LOCK)
            yield RegistrySession(conn, self.host)
        finally:
            await conn.close()

    async def forget(self, registrations: Sequence[tuple[str, str]]) -> None:
        """Remove our registrations (name, address), each unless another process has
        replaced it since; one connection for all of them."""
        async with _translated():
            conn = await connect(self._url)
        try:
            async with _translated():
                for name, address in registrations:
                    await conn.execute(
                        FORGET_STANDIN, {"name": name, "host": self.host, "address": address}
                    )
        finally:
            await conn.close()


@asynccontextmanager
async def _translated() -> AsyncIterator[None]:
    """Database failures as `RegistryUnavailable`, with a reason that holds no secret."""
    try:
        yield
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedTable) as exc:
        # The message names the table or the privilege, never the connection string.
        raise RegistryUnavailable(_first_line(exc), permanent=True) from None
    except DatabaseUnavailable as exc:
        raise RegistryUnavailable(str(exc), permanent=False) from None  # already masked
    except (psycopg.Error, OSError) as exc:
        raise RegistryUnavailable(type(exc).__name__, permanent=False) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
