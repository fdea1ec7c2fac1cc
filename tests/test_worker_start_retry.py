"""A worker started while its database cannot be reached yet (a failover under way: the old
primary frozen, the standby not yet promoted) waits that out for up to a lease instead of
exiting at once. The short failover soak saw a replacement worker, started during a
promotion, exit 2 ("bad usage") on its first connection's timeout: once in the engine's
own start-up, and once (seed 99585810, in CI) in `taskboard worker`'s checks before it."""

from __future__ import annotations

import asyncio
import json

import pytest
from taskboard.core import sql
from taskboard.core.base.errors import DatabaseUnavailable
from taskboard.core.cli.main import main
from taskboard.core.engine import pooler
from taskboard.core.engine.db_errors import refused_for_good
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.engine.worker import Worker
from taskboard.core.kinds import builtin_registry

from tests.drop_proxy import DropProxy


def _via(proxy: DropProxy, db_url: str) -> str:
    url = proxy.url(db_url)
    return url + ("&" if "?" in url else "?") + "connect_timeout=1"


async def test_a_worker_started_while_the_database_hangs_starts_once_it_answers(
    db_url: str,
) -> None:
    async with DropProxy.for_url(db_url) as proxy:
        proxy.blackhole(True)  # connections are accepted and never answered
        worker = Worker(_via(proxy, db_url), registry=builtin_registry(),
                        settings=WorkerSettings(worker_id="late", lease_seconds=6.0))
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(2.0)  # two connect timeouts
        assert not task.done(), task
        proxy.blackhole(False)
        await asyncio.wait_for(worker.wait_started(), timeout=10)
        worker.drain()
        await asyncio.wait_for(task, 30)


async def test_a_database_that_never_answers_is_given_up_after_a_lease(db_url: str) -> None:
    async with DropProxy.for_url(db_url) as proxy:
        proxy.blackhole(True)
        worker = Worker(_via(proxy, db_url), registry=builtin_registry(),
                        settings=WorkerSettings(worker_id="never", lease_seconds=2.0))
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(DatabaseUnavailable):
            await asyncio.wait_for(worker.run(), timeout=15)
        assert 2.0 <= loop.time() - started < 10.0


async def test_taskboard_worker_whose_pooler_probe_gets_no_answer_exits_5(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start-up probe (is this a transaction pooler?) connected, then the server went
    silent: the database is the cause, so the command waits it out for a lease and then
    exits 5 (unreachable), not 2 (bad usage). Fails before the fix (exit 2 at once)."""
    monkeypatch.setattr(pooler, "PROBE_SECONDS", 1.0)  # 10 s in the field
    async with DropProxy.for_url(db_url) as proxy:
        # The probe's first statement is the first to ask for the backend's pid.
        proxy.drop_on(sql.BACKEND_PID.encode())
        monkeypatch.setenv("TASKBOARD_DATABASE_URL", _via(proxy, db_url))
        monkeypatch.delenv("DATABASE_URL", raising=False)
        loop = asyncio.get_running_loop()
        started = loop.time()
        # `main` runs its own event loop: in a thread, while the proxy runs on this one.
        code = await asyncio.to_thread(
            main, ["worker", "--id", "probed", "--pool-size", "4", "--lease", "3"])
        took = loop.time() - started
    err = capsys.readouterr().err
    assert code == 5, err
    *retries, line = err.strip().splitlines()
    assert line.startswith("taskboard worker: error: ") and "no answer" in line, line
    assert "waited 3s, a lease" in line, line
    assert retries and all("no answer" in json.loads(r)["error"] for r in retries), err
    assert 3.0 <= took < 12.0


async def test_taskboard_worker_started_while_the_database_hangs_runs_once_it_answers(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command's own checks before the engine starts (room for the pool, no transaction
    pooler, the schema) wait out a database that does not answer yet, for up to a lease.
    Fails before the fix: exit 2 at the first connection's timeout."""
    async with DropProxy.for_url(db_url) as proxy:
        proxy.blackhole(True)
        monkeypatch.setenv("TASKBOARD_DATABASE_URL", _via(proxy, db_url))
        monkeypatch.delenv("DATABASE_URL", raising=False)
        run = asyncio.create_task(asyncio.to_thread(
            main, ["worker", "--id", "patient", "--burst", "--lease", "8", "--pool-size", "4"]))
        await asyncio.sleep(2.5)  # two connect timeouts at least
        assert not run.done(), capsys.readouterr().err
        proxy.blackhole(False)
        code = await asyncio.wait_for(run, 30)
    err = capsys.readouterr().err
    assert code == 0, err
    records = [json.loads(line) for line in err.strip().splitlines()]
    waits = [r for r in records if r.get("msg", "").startswith("cannot start yet")]
    assert waits and all(r["level"] == "warning" for r in waits), err
    assert any(r.get("msg") == "worker starting" for r in records), err


@pytest.mark.parametrize(
    ("message", "for_good"),
    [
        ('cannot connect to x: connection failed: ... failed: FATAL:  database "app" does not'
         " exist", True),
        ('... failed: FATAL:  password authentication failed for user "maya"', True),
        ('... failed: FATAL:  role "nobody" does not exist', True),
        ("... failed: FATAL:  the database system is starting up", False),
        ("... failed: FATAL:  the database system is in recovery mode", False),
        ("... failed: FATAL:  sorry, too many clients already", False),
        ("... failed: FATAL:  remaining connection slots are reserved for roles with the"
         " SUPERUSER attribute", False),
        ('... port 1 failed: Connection refused', False),
        ("... failed: connection timeout expired", False),
        ("... failed: session is read-only", False),
    ],
)
def test_which_refusals_a_starting_worker_waits_out(message: str, for_good: bool) -> None:
    assert refused_for_good(message) is for_good


async def test_taskboard_worker_whose_start_up_check_goes_silent_starts_on_a_fresh_connection(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The room-for-the-pool query of `taskboard worker`'s own checks met a silent flow: it
    waited on it for ever, writing nothing (most likely the replacement worker of the short
    fault run, seed 1868317726, that never registered: the silent-flow fault came while it
    started). Now the check gives up after its answer limit and the next try starts."""
    async with DropProxy.for_url(db_url) as proxy:
        proxy.drop_on(sql.FREE_CONNECTION_SLOTS.encode(), once=True)
        monkeypatch.setenv("TASKBOARD_DATABASE_URL", _via(proxy, db_url))
        monkeypatch.delenv("DATABASE_URL", raising=False)
        loop = asyncio.get_running_loop()
        started = loop.time()
        code = await asyncio.wait_for(asyncio.to_thread(
            main, ["worker", "--id", "forgotten", "--burst", "--lease", "1", "--pool-size", "4"]),
            timeout=30)
        took = loop.time() - started
        assert proxy.open_flows > proxy.live_flows  # the silent flow is still there
    err = capsys.readouterr().err
    assert code == 0, err
    records = [json.loads(line) for line in err.strip().splitlines()]
    waits = [r for r in records if r.get("msg", "").startswith("cannot start yet")]
    # One wait, named: the silent query, past a one-second lease, still gets its retry.
    assert len(waits) == 1 and "room for the pool: no answer" in waits[0]["error"], err
    limit = WorkerSettings(lease_seconds=1.0).startup_answer_timeout
    assert limit <= took < limit + 15, took


@pytest.mark.parametrize("statement", ["room", "registration"])
async def test_a_worker_whose_connection_goes_silent_before_it_starts_starts_on_another(
    db_url: str, statement: str
) -> None:
    """The engine's own start (room for the pool, then registering on a pool connection):
    a silent flow there held the worker before it ever started, for ever."""
    pattern = (sql.FREE_CONNECTION_SLOTS if statement == "room"
               else sql.REGISTER_WORKER.strip().splitlines()[0])
    async with DropProxy.for_url(db_url) as proxy:
        proxy.drop_on(pattern.encode(), once=True)
        worker = Worker(_via(proxy, db_url), registry=builtin_registry(),
                        settings=WorkerSettings(worker_id=f"silent-{statement}",
                                                lease_seconds=1.0))
        loop = asyncio.get_running_loop()
        started = loop.time()
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(worker.wait_started(), timeout=20)
        took = loop.time() - started
        assert proxy.open_flows > proxy.live_flows  # the silent flow is still there
        worker.drain()
        await asyncio.wait_for(task, 30)
    assert worker.settings.startup_answer_timeout <= took, took
