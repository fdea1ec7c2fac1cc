"""Closing a connection that another task may be waiting on.

The worker closes a connection under a statement (an answer limit, a lost lease) rather
than cancel it and wait for psycopg's cancel request. Closing frees the socket's file
descriptor at once, while the waiting task still has it registered with the event loop.
The loop's registration outlives the descriptor: a socket opened next may get the same
number, and the loop, finding the number registered already, does not watch the new socket
for reads (it never hears it); when the cancelled task unwinds, psycopg asks the loop to
forget the number, which asyncio refuses with a `RuntimeError` if the new socket is a
transport's. So the registrations go first, while the number is still this connection's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from psycopg import AsyncConnection


def close_under_waiter(conn: AsyncConnection[Any]) -> None:
    """Close `conn` now, first taking its socket out of the running loop's watch."""
    if conn.closed:
        return
    try:
        number = conn.pgconn.socket
    except psycopg.OperationalError:  # no socket left to watch
        number = -1
    if number >= 0:
        loop = asyncio.get_running_loop()
        loop.remove_reader(number)
        loop.remove_writer(number)
    conn.pgconn.finish()
