"""The embedded server: a restart in place, then stop, leaves no server behind."""

from __future__ import annotations

from pathlib import Path

import psycopg
from taskboard.core.runtime.embedded import EmbeddedPostgres


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postmaster.pid").read_text().split()[0])


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting for its reaper is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_stop_after_restart_stops_the_restarted_server(tmp_path: Path) -> None:
    server = EmbeddedPostgres(tmp_path / "pg")
    url = server.start()
    first = postmaster_pid(server.data_dir)
    server.restart()
    second = postmaster_pid(server.data_dir)
    assert second != first and running(second)
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    server.stop()
    assert not running(second), "the restarted postmaster outlived stop()"
