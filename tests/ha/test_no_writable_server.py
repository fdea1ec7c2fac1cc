"""The supervisor's rule for read-only errors, on its own (no server needed but for the
probe's own test: it judges the errors the roles hand it): a lease without a successful write makes the worker unhealthy;
a write by any role that only succeeds by writing ends the streak; a read, an idle renewal
or a janitor's silence does not; and the warnings stay few."""

from __future__ import annotations

import asyncio
import logging
import time

import psycopg
import psycopg.sql
import pytest
from psycopg.conninfo import conninfo_to_dict
from taskboard.core.engine.db_errors import AnswerTimeout
from taskboard.core.engine.read_only import ServerState, server_state
from taskboard.core.engine.supervisor import Supervisor
from taskboard.core.runtime.metrics import Metrics

from tests.conftest import wait_for
from tests.drop_proxy import DropProxy

LEASE = 0.4


def _read_only() -> psycopg.Error:
    return psycopg.errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction")


def _supervisor(verdicts: list[tuple[str, str]], metrics: Metrics | None = None) -> Supervisor:
    return Supervisor("w", unhealthy_after=LEASE, retry_cap=0.1,
                      on_unhealthy=lambda role, error: verdicts.append((role, error)),
                      emit=metrics)


async def test_a_lease_without_a_write_is_unhealthy_even_if_reads_and_idle_roles_succeed() -> None:
    verdicts: list[tuple[str, str]] = []
    sup = _supervisor(verdicts)
    sup.trouble("janitor", _read_only())  # the janitor does not try again for a while
    sup.ok("scheduler")  # a read succeeds on a read-only server
    sup.ok("renewals")  # nothing held: a renewal pass writes nothing
    await asyncio.sleep(LEASE * 1.5)
    assert len(verdicts) == 1
    role, error = verdicts[0]
    assert role == "janitor" and "no writable server" in error
    assert sup.last_error == error


@pytest.mark.parametrize("writer", ["claims", "control", "completions"])
async def test_a_successful_write_ends_the_streak(writer: str) -> None:
    verdicts: list[tuple[str, str]] = []
    sup = _supervisor(verdicts)
    sup.trouble("janitor", _read_only())
    sup.trouble("claims", _read_only())
    sup.ok(writer)  # the worker reached a writable server
    await asyncio.sleep(LEASE * 1.5)
    assert verdicts == []
    # A later read-only error starts a new streak, judged a lease after it.
    sup.trouble("renewals", _read_only())
    await asyncio.sleep(LEASE * 0.5)
    assert verdicts == []
    await asyncio.sleep(LEASE)
    assert [role for role, _ in verdicts] == ["renewals"]


async def test_a_process_stopped_across_the_deadline_gets_a_lease_to_try_again() -> None:
    # A worker meets a read-only server, then is stopped (SIGSTOP, a frozen VM) past the
    # lease; the server was writable again long before it wakes. Blocking the loop stands
    # for the stop: the monotonic clock runs on, no role runs. The late timer is no
    # evidence; the claims that succeed after the wake-up are.
    verdicts: list[tuple[str, str]] = []
    sup = _supervisor(verdicts)
    sup.trouble("renewals", _read_only())
    time.sleep(LEASE * 2)  # noqa: ASYNC251 - the stopped process, on purpose
    await asyncio.sleep(0)  # the wake-up: the overdue timer fires first
    await asyncio.sleep(0.05)
    assert verdicts == []
    sup.ok("claims")  # the first claim after the wake-up writes
    await asyncio.sleep(LEASE * 1.5)
    assert verdicts == []


async def test_a_stopped_process_still_judges_a_server_that_stays_read_only() -> None:
    verdicts: list[tuple[str, str]] = []
    sup = _supervisor(verdicts)
    sup.trouble("renewals", _read_only())
    time.sleep(LEASE * 2)  # noqa: ASYNC251 - the stopped process, on purpose
    await asyncio.sleep(0)
    woke = asyncio.get_running_loop().time()
    while not verdicts and asyncio.get_running_loop().time() - woke < LEASE * 3:
        sup.trouble("claims", _read_only())  # every write after the wake-up is refused
        await asyncio.sleep(0.05)
    assert [role for role, _ in verdicts] == ["renewals"]
    judged = asyncio.get_running_loop().time() - woke
    assert LEASE * 0.9 <= judged < LEASE * 2, judged
    assert "no writable server" in verdicts[0][1]


def _answering(verdicts: list[tuple[str, str]]) -> Supervisor:
    # As a worker's crew builds it: the verdict waits for statements still out.
    return Supervisor("w", unhealthy_after=LEASE, retry_cap=0.1, answer_timeout=LEASE / 2,
                      on_unhealthy=lambda role, error: verdicts.append((role, error)))


async def test_a_server_that_stops_answering_after_refusing_writes_is_an_outage() -> None:
    # The short fault run, seed 78518193: a 0.6 s read-only switchover, then the server
    # frozen (SIGSTOP) for 2.4 s before the worker had written again. The statements sent
    # to the frozen server answer after the lease is up, with no answer: an outage, waited
    # out as any other, not "no writable server" (exit 4).
    verdicts: list[tuple[str, str]] = []
    sup = _answering(verdicts)
    sup.trouble("control", _read_only())
    await asyncio.sleep(LEASE * 1.2)  # the lease is up; the heartbeat is still out
    sup.trouble("control", AnswerTimeout("heartbeat: no answer", silent=True))
    await asyncio.sleep(LEASE * 1.5)
    assert verdicts == []
    # Back, and read-only again: a new streak, judged again.
    sup.trouble("claims", _read_only())
    await asyncio.sleep(LEASE * 2)
    assert [role for role, _ in verdicts] == ["claims"]


async def test_a_pool_with_nowhere_to_connect_is_still_no_writable_server() -> None:
    # Every server read-only: the URL's target_session_attrs=read-write finds none, and a
    # role waiting for a connection gives up on its limit without a statement sent.
    verdicts: list[tuple[str, str]] = []
    sup = _answering(verdicts)
    sup.trouble("claims", _read_only())
    for _ in range(6):
        await asyncio.sleep(LEASE / 4)
        sup.trouble("control", AnswerTimeout("heartbeat: no answer", silent=False))
    await asyncio.sleep(LEASE)
    assert [role for role, _ in verdicts] == ["claims"]


@pytest.mark.parametrize(
    ("state", "judged"), [("read-only", True), ("silent", False), ("writable", False)]
)
async def test_the_verdict_asks_a_fresh_session_first(state: ServerState, judged: bool) -> None:
    # The same seed, another replay: the pool had closed every connection when it left the
    # read-only server, so the roles were waiting for new connections to the frozen one,
    # which from the supervisor looks like a URL with nowhere writable to go. A fresh
    # session through the URL tells them apart: read-only is the verdict; no answer is an
    # outage (the streak ends); a writable server gets the roles another lease.
    verdicts: list[tuple[str, str]] = []
    asked: list[float] = []

    async def probe() -> ServerState:
        asked.append(asyncio.get_running_loop().time())
        return state

    sup = Supervisor("w", unhealthy_after=LEASE, retry_cap=0.1, answer_timeout=LEASE / 2,
                     probe=probe, on_unhealthy=lambda role, error: verdicts.append((role, error)))
    sup.trouble("claims", _read_only())
    await asyncio.sleep(LEASE * 1.5 + 0.1)
    assert len(asked) == 1
    assert [role for role, _ in verdicts] == (["claims"] if judged else [])
    if state == "writable":  # asked again a lease (and an answer limit) later
        await asyncio.sleep(LEASE * 1.5 + 0.1)
        assert len(asked) == 2 and verdicts == []
    if state == "silent":  # the streak is over: nothing more is asked
        await asyncio.sleep(LEASE * 2)
        assert len(asked) == 1 and verdicts == []


async def test_a_probe_that_breaks_is_asked_again_a_lease_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Unjudged, a streak whose probe raised would hold no timer: never a verdict, never
    # another look, while every write the worker tries is refused.
    caplog.set_level(logging.WARNING, logger="taskboard.worker")
    verdicts: list[tuple[str, str]] = []
    answers: list[ServerState | Exception] = [RuntimeError("probe broke"), "read-only"]

    async def probe() -> ServerState:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    sup = Supervisor("w", unhealthy_after=LEASE, retry_cap=0.1, answer_timeout=LEASE / 2,
                     probe=probe, on_unhealthy=lambda role, error: verdicts.append((role, error)))
    sup.trouble("claims", _read_only())
    await wait_for(lambda: len(answers) == 1, what="the first look")
    assert verdicts == []  # no verdict from a probe that broke
    assert "read-only probe failed" in [r.getMessage() for r in caplog.records]
    await wait_for(lambda: verdicts, what="the verdict at the second look")
    assert answers == [] and [role for role, _ in verdicts] == ["claims"]


async def test_a_fresh_session_tells_writable_read_only_and_silent_apart(db_url: str) -> None:
    assert await server_state(db_url, 5.0) == "writable"
    dbname = conninfo_to_dict(db_url)["dbname"]
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await conn.execute(
            psycopg.sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(
                psycopg.sql.Identifier(dbname)
            )
        )
        try:
            assert await server_state(db_url, 5.0) == "read-only"
        finally:
            await conn.execute(
                psycopg.sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(
                    psycopg.sql.Identifier(dbname)
                )
            )
    async with DropProxy.for_url(db_url) as proxy:
        proxy.blackhole(True)  # a frozen host: connections accepted, never answered
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await server_state(proxy.url(db_url), 1.0) == "silent"
        assert loop.time() - started < 3.0


async def test_an_outage_is_a_few_lines_not_one_per_retry(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="taskboard.worker")
    sup = _supervisor([])
    roles = ["claims", "renewals", "control", "completions"]
    for _ in range(50):  # every role retrying every 10 ms for half a second
        for role in roles:
            sup.trouble(role, _read_only())
        await asyncio.sleep(0.01)
    lines = [r for r in caplog.records if r.name == "taskboard.worker"]
    # Each role says once that it is stuck; the repeats share one line a second.
    assert {getattr(r, "fields", {}).get("role") for r in lines} == set(roles)
    assert len(lines) <= len(roles) + 1, [r.getMessage() for r in lines]


async def test_the_metrics_count_each_departure_once() -> None:
    metrics = Metrics()
    sup = _supervisor([], metrics)
    for _ in range(5):
        sup.trouble("claims", _read_only())
        sup.trouble("control", _read_only())
    sup.ok("control")  # a writable server: this departure is over
    sup.trouble("renewals", _read_only())  # and the next server is read-only too
    text = metrics.render().decode()
    assert 'taskboard_read_only_departures_total{worker="w"} 2.0' in text


async def test_a_burst_worker_still_gives_up_on_errors_left_out_of_the_log() -> None:
    # The one-line-a-second limit is for the log only: burst mode's outage clock (exit 5)
    # sees every error.
    unreachable: list[str] = []
    sup = Supervisor("w", unhealthy_after=10.0, retry_cap=0.1, on_unhealthy=lambda r, e: None,
                     unreachable_after=0.3, on_unreachable=lambda r, e: unreachable.append(r))
    for _ in range(10):
        sup.trouble("claims", psycopg.OperationalError("connection refused"))
        await asyncio.sleep(0.05)
    assert unreachable == ["claims"]
