"""A training room's databases: each `--serve --demo` browser session tells its story in a
database of its own on the same server, made when the session starts and dropped when it
ends, so thirty trainees each have their own workers A and B, their own jobs and their own
`R`, and none of them sees another's story.

A session's name is made by the serving process (a counter and a random part); it is
checked against a fixed pattern here and reaches SQL only as a quoted identifier.
"""

from __future__ import annotations

import re

import psycopg
from psycopg import sql as composed
from psycopg.conninfo import make_conninfo
from taskboard.core import sql
from taskboard.core.base.errors import ConfigError
from taskboard.core.engine.registration import free_connection_slots
from taskboard.core.runtime.db import Database, connection

ROOM_PREFIX = "taskboard_demo_s"
"""Every session database's name starts so (and no other database of Taskboard's does)."""
_SESSION = re.compile(r"[a-z0-9]{1,24}")


def room_database_name(session: str) -> str:
    """The database of browser session `session` (lower-case letters and digits)."""
    if not _SESSION.fullmatch(session):
        raise ConfigError(
            f"a demo session name is 1 to 24 lower-case letters and digits, got {session!r}"
        )
    return ROOM_PREFIX + session


async def open_room_database(server: Database, session: str) -> Database:
    """A fresh, empty database for `session` on `server` (one left from an earlier session
    of the same name is dropped first). The returned `Database` shares the server."""
    name = room_database_name(session)
    async with connection(server.url) as conn:
        try:
            await conn.execute(
                composed.SQL(sql.DROP_ROOM_DATABASE).format(composed.Identifier(name))
            )
            await conn.execute(
                composed.SQL(sql.CREATE_ROOM_DATABASE).format(composed.Identifier(name))
            )
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"each browser session's demo runs in a database of its own, and {name} could "
                f"not be created on {server.masked}: {reason}; grant CREATEDB or run the demo "
                "on the embedded server"
            ) from None
    return Database(make_conninfo(server.url, dbname=name), server.embedded)


async def drop_room_database(server_url: str, session: str) -> None:
    """Drop `session`'s database (its connections are ended first); gone already is fine."""
    name = room_database_name(session)
    async with connection(server_url) as conn:
        await conn.execute(
            composed.SQL(sql.DROP_ROOM_DATABASE).format(composed.Identifier(name))
        )


async def room_budget(server_url: str) -> tuple[int, int]:
    """(free, max_connections) of the server the rooms share."""
    async with connection(server_url) as conn:
        return await free_connection_slots(conn)
