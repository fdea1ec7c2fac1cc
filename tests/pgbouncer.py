"""PgBouncer for real: the distribution's `pgbouncer`, started on a free port in front of the
test server, in a given pool mode, and stopped again. Used by tests/test_pgbouncer.py (and
usable from bench scripts: `PgBouncer(server_url, "session", folder).start()`).

Clients log in to PgBouncer with SCRAM against a plain-text auth file: the server's own
password when its URL has one (PgBouncer reuses it to log in to the server), otherwise a
generated one (the embedded server trusts local connections, so PgBouncer logs in to it
without one, while the clients still go through real password authentication).

PgBouncer refuses to run as root ("PgBouncer should not run as root"). As root it is
started with `user =` in its configuration, which makes it drop to that user once its
files are read: the owner of the server's socket directory (the embedded server's data
folder, mode 0700, is only reachable by its owner), else `nobody`. Not as root, it simply
runs as the current user.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal
from urllib.parse import quote, urlsplit, urlunsplit

import pytest
from psycopg.conninfo import conninfo_to_dict

PoolMode = Literal["session", "transaction", "statement"]

INSTALL_HINT = (
    "pgbouncer is not installed: `sudo apt-get install -y pgbouncer` (Debian/Ubuntu; "
    ".ci/run does it), or put a pgbouncer binary on PATH"
)
START_SECONDS = 10.0
# Where Debian puts it; /usr/sbin is not on every non-root user's PATH.
_CANDIDATES = ("/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/bin/pgbouncer")


def pgbouncer_binary() -> str | None:
    """The pgbouncer executable, or None when it is not installed."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    return next((c for c in _CANDIDATES if os.access(c, os.X_OK)), None)


def pgbouncer_version() -> str:
    """`PgBouncer 1.18.0`, as the binary says."""
    binary = pgbouncer_binary()
    if binary is None:
        return "not installed"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    return (out.stdout.strip().splitlines() or ["unknown"])[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgBouncer:
    """One pgbouncer process in front of the server at `server_url`, any database on it."""

    def __init__(
        self,
        server_url: str,
        pool_mode: PoolMode,
        folder: Path,
        *,
        pool_size: int = 60,
        round_robin: bool = False,
    ) -> None:
        params = conninfo_to_dict(server_url)
        self.mode = pool_mode
        self.folder = folder
        self.user = str(params.get("user") or "postgres")
        self.password = str(params.get("password") or secrets.token_hex(12))
        self._server_host = str(params.get("host") or "localhost")
        self._server_port = str(params.get("port") or 5432)
        self._pool_size = pool_size
        self._round_robin = round_robin
        self._template = server_url
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    def url(self, database_url: str) -> str:
        """`database_url` (a database on the same server) reached through PgBouncer."""
        dbname = urlsplit(database_url).path or "/postgres"
        netloc = f"{quote(self.user, safe='')}:{quote(self.password, safe='')}@127.0.0.1:{self.port}"
        return urlunsplit(("postgresql", netloc, dbname, "", ""))

    def _run_as(self) -> str | None:
        if os.geteuid() != 0:
            return None
        host = Path(self._server_host)
        if host.is_dir() and host.stat().st_uid != 0:
            import pwd

            return pwd.getpwuid(host.stat().st_uid).pw_name
        return "nobody"

    def _write_config(self) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        auth = self.folder / "userlist.txt"
        auth.write_text(f'"{self.user}" "{self.password}"\n')
        auth.chmod(0o600)
        lines = [
            "[databases]",
            # Any database name, to the same name on the server: each test's fresh database.
            f"* = host={self._server_host} port={self._server_port}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = scram-sha-256",
            f"auth_file = {auth}",
            f"pool_mode = {self.mode}",
            f"default_pool_size = {self._pool_size}",
            "max_client_conn = 500",
            # LIFO (the default) hands a client the server connection released last, often
            # its own: round robin makes a transaction-mode client change servers at once.
            f"server_round_robin = {int(self._round_robin)}",
            "query_wait_timeout = 30",
        ]
        run_as = self._run_as()
        if run_as is not None:
            lines.append(f"user = {run_as}")
        config = self.folder / "pgbouncer.ini"
        config.write_text("\n".join(lines) + "\n")
        config.chmod(0o600)
        return config

    @property
    def log(self) -> str:
        """What pgbouncer wrote so far (its log goes to stderr)."""
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self) -> PgBouncer:
        """Start on a free port and wait until it accepts connections; fails the test with
        how to install pgbouncer when it is missing."""
        binary = pgbouncer_binary()
        if binary is None:
            pytest.fail(INSTALL_HINT, pytrace=False)
        for _ in range(3):  # the free port may be taken between looking and binding
            self.port = _free_port()
            config = self._write_config()
            with (self.folder / "pgbouncer.log").open("wb") as log:
                self._proc = subprocess.Popen(
                    [binary, str(config)], stdout=log, stderr=log, stdin=subprocess.DEVNULL
                )
            if self._wait_listening():
                return self
            self.stop()
        raise RuntimeError(f"pgbouncer did not start; its log:\n{self.log[-2000:]}")

    def _wait_listening(self) -> bool:
        assert self._proc is not None
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            with contextlib.suppress(OSError), socket.create_connection(
                ("127.0.0.1", self.port), timeout=0.5
            ):
                return True
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        """Stop pgbouncer (SIGTERM: it closes every connection at once)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def running_pgbouncer(
    server_url: str, pool_mode: PoolMode, folder: Path, **options: int | bool
) -> Iterator[PgBouncer]:
    """A started PgBouncer for the block."""
    bouncer = PgBouncer(server_url, pool_mode, folder, **options)  # type: ignore[arg-type]
    bouncer.start()
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture(scope="session")
def pgbouncer_session(
    pg_server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PgBouncer]:
    """PgBouncer in session mode in front of the test server."""
    with running_pgbouncer(pg_server_url, "session", tmp_path_factory.mktemp("pgb-s")) as b:
        yield b


@pytest.fixture(scope="session")
def pgbouncer_transaction(
    pg_server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PgBouncer]:
    """PgBouncer in transaction mode (round robin: a client's consecutive transactions
    land on different server connections whenever more than one is idle)."""
    with running_pgbouncer(
        pg_server_url, "transaction", tmp_path_factory.mktemp("pgb-t"), round_robin=True
    ) as b:
        yield b
