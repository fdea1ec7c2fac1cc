"""Issue 22 item 7: `taskboard worker --burst` whose database goes away exits 5 after a lease
instead of retrying for ever. The database is cut by a TCP proxy in front of the real
server that closes every connection and refuses new ones."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from tests.test_cli import CLI, run_cli
from tests.test_cli_operations import ok, one, poll


class CuttableProxy:
    """Forwards TCP on 127.0.0.1 to the server of `url` (TCP or a Unix socket) until `cut`."""

    def __init__(self, url: str) -> None:
        info = conninfo_to_dict(url)
        self._host = str(info.get("host") or "localhost")
        self._port = int(info.get("port") or 5432)
        self._user, self._dbname = info.get("user", "postgres"), info["dbname"]
        self._password = info.get("password") or ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    def __enter__(self) -> CuttableProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return (f"postgresql://{self._user}:{self._password}@127.0.0.1:{self.port}/"
                f"{self._dbname}")

    def cut(self) -> None:
        """Close every forwarded connection and stop listening (new ones are refused)."""
        asyncio.run_coroutine_threadsafe(self._cut(), self._loop).result(10)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.close()

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._host.startswith("/"):
            return await asyncio.open_unix_connection(f"{self._host}/.s.PGSQL.{self._port}")
        return await asyncio.open_connection(self._host, self._port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await self._open()
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers.difference_update((writer, up_writer))


def test_a_burst_worker_whose_database_goes_away_exits_5_after_a_lease(
    db_url: str, tmp_path: Path
) -> None:
    [job] = ok(run_cli(db_url, "enqueue", "sleep", "--payload", '{"seconds": 30}'))
    log = tmp_path / "worker.log"
    with CuttableProxy(db_url) as proxy, log.open("w") as out:
        env: dict[str, Any] = {**os.environ, "TASKBOARD_DATABASE_URL": proxy.url}
        worker = subprocess.Popen(
            [*CLI, "worker", "--burst", "--lease", "2", "--pool-size", "4", "--id", "b1",
             "--poll", "0.2", "--drain-timeout", "1"],
            env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
        )
        try:
            poll(lambda: one(db_url, "SELECT lease_token IS NOT NULL FROM taskboard_jobs"
                                     " WHERE id = %s", int(job))[0],
                 what="the burst worker claimed the job")
            proxy.cut()
            cut = time.monotonic()
            code = worker.wait(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    took = time.monotonic() - cut
    text = log.read_text()
    # At 683562c it never exits: it retries every claim, renewal and heartbeat for ever.
    assert code == 5, (code, text[-3000:])
    assert "database unreachable" in text and "Traceback" not in text, text[-3000:]
    # A lease (2 s) of failures, then a drain bounded by --drain-timeout and the answer
    # timeouts of the statements that cannot be sent; never minutes.
    assert 2.0 <= took < 45, took
