"""The libpq settings every connection Taskboard opens gets, unless its URL says otherwise.

Why each one (DESIGN.md invariant 16: a dead connection is noticed in seconds):
- `connect_timeout`: without it libpq waits for the kernel's TCP connect timeout (about
  130 s per host) when a server is frozen or a route black-holes; with a multi-host URL the
  timeout applies to each host in turn.
- `keepalives` (idle, interval, count): an idle connection whose peer vanished without a
  FIN (a NAT that forgot the flow, a server that lost power) is found dead after about
  idle + interval x count seconds instead of the kernel's two hours.
- `tcp_user_timeout`: a connection with data sent but never acknowledged is dropped by the
  kernel after this long instead of retransmitting for ~15 minutes.
- `application_name`: an operator finds Taskboard's sessions in `pg_stat_activity`
  (`taskboard-worker:<id>`, `taskboard-cli:<command>`, `taskboard-tui`).

None of these replace the worker's own answer limits (engine/connection.py): a peer that
still acknowledges packets but never answers (a frozen server process behind a live
kernel, a proxy that swallows bytes) is only noticed by them. Keepalives and the user
timeout are TCP settings, ignored by libpq on Unix-socket connections.

A parameter in the URL wins over these defaults, and so do libpq's own environment
variables for the two that have one (`PGCONNECT_TIMEOUT`, `PGAPPNAME`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

CONNECT_TIMEOUT_SECONDS = 5
KEEPALIVES_IDLE_SECONDS = 5
KEEPALIVES_INTERVAL_SECONDS = 2
KEEPALIVES_COUNT = 3
TCP_USER_TIMEOUT_MS = 10_000
# What a session is called when its process said nothing more precise (see `name_sessions`).
DEFAULT_APPLICATION_NAME = "taskboard"

_ENVIRONMENT = {"connect_timeout": "PGCONNECT_TIMEOUT", "application_name": "PGAPPNAME"}
_process_name = DEFAULT_APPLICATION_NAME


def name_sessions(name: str) -> None:
    """Name the sessions this process opens from now on (`taskboard-cli:status`,
    `taskboard-tui`); a worker names its own sessions whatever this says."""
    global _process_name
    _process_name = name


def application_name() -> str:
    """What sessions of this process are called unless told otherwise."""
    return _process_name


def defaults(application_name: str | None = None) -> dict[str, str]:
    """Every default parameter, as libpq keywords and text values."""
    params = {
        "connect_timeout": str(CONNECT_TIMEOUT_SECONDS),
        "keepalives": "1",
        "keepalives_idle": str(KEEPALIVES_IDLE_SECONDS),
        "keepalives_interval": str(KEEPALIVES_INTERVAL_SECONDS),
        "keepalives_count": str(KEEPALIVES_COUNT),
        "tcp_user_timeout": str(TCP_USER_TIMEOUT_MS),
        "application_name": application_name or _process_name,
    }
    if pq.version() < 120000:
        # An older system libpq (psycopg without its bundled one) refuses the keyword.
        del params["tcp_user_timeout"]
    return params


def with_defaults(
    url: str,
    application_name: str | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """`url` (a URL or key=value string) with every default it does not set itself added;
    returned unchanged when it sets them all. Raises psycopg's `ProgrammingError` for a
    string libpq cannot parse (check it first: `db.check_dsn`)."""
    env = os.environ if env is None else env
    given = conninfo_to_dict(url)
    extra = {
        key: value
        for key, value in defaults(application_name).items()
        if given.get(key) in (None, "") and not env.get(_ENVIRONMENT.get(key, ""))
    }
    return make_conninfo(url, **extra) if extra else url
