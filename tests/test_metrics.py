"""The Prometheus endpoint: a real `taskboard worker --metrics-port` process scraped over
HTTP, in-process workers and the dashboard's fleet, a database that does not answer, and
the subscriber's arithmetic on every event it counts."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from taskboard.core.engine.events import (
    Claimed,
    Completed,
    CompletionRejected,
    Dead,
    LeaseGivenUp,
    PoolStats,
    RenewalFailed,
    Renewed,
    WorkerStarted,
    WorkerStopped,
)
from taskboard.core.fleet import FleetOptions, WorkerSettings, open_fleet
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue_many
from taskboard.core.runtime.metrics import Metrics, serve_metrics

from tests.conftest import wait_for
from tests.harness import Recorder, run_workers
from tests.test_cli import CLI, assert_one_line_error, run_cli

NAMED = {
    "taskboard_jobs",
    "taskboard_database_up",
    "taskboard_scrape_errors_total",
    "taskboard_claims_total",
    "taskboard_completions_total",
    "taskboard_pickup_latency_seconds_count",
    "taskboard_pool_connections",
    "taskboard_in_flight",
    "taskboard_capacity",
}


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape: (name, labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(scraped: dict[Any, float], name: str, **labels: str) -> float | None:
    return scraped.get((name, frozenset(labels.items())))


def names(scraped: dict[Any, float]) -> set[str]:
    return {name for name, _ in scraped}


def fetch(url: str) -> dict[Any, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return samples(response.read().decode())


def insert_noops(url: str, n: int, queue: str = "default") -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("INSERT INTO taskboard_jobs (kind, queue) SELECT 'noop', %s"
                  " FROM generate_series(1, %s)", (queue, n))


def metrics_url(log: Path, proc: subprocess.Popen[bytes], timeout: float = 30) -> str:
    """The address a worker started with `--metrics-port 0` logged."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if '"serving Prometheus metrics"' in line:
                return str(json.loads(line)["url"])
        assert proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.05)
    raise AssertionError("the worker never said where it serves metrics")


# --- a worker process, scraped over HTTP -------------------------------------------------


def test_a_worker_process_serves_the_named_series_and_they_move_when_jobs_run(
    db_url: str, tmp_path: Path
) -> None:
    insert_noops(db_url, 3)
    log = tmp_path / "worker.log"
    env = {**os.environ, "TASKBOARD_DATABASE_URL": db_url}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*CLI, "worker", "--id", "metered", "--pool-size", "5", "--concurrency", "7",
             "--metrics-port", "0",
             "--queue", "default", "--queue", "mail"],
            env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
        )
    try:
        url = metrics_url(log, proc)
        assert url.startswith("http://127.0.0.1:")  # loopback unless told otherwise

        def completed(n: int) -> dict[Any, float] | None:
            scraped = fetch(url)
            done = value(scraped, "taskboard_completions_total", worker="metered")
            # Pool gauges come with the heartbeat (every second): wait for the first.
            pool = value(scraped, "taskboard_pool_connections", worker="metered", state="max")
            return scraped if done == n and pool is not None else None

        first = _poll(lambda: completed(3), "3 completions counted")
        assert NAMED <= names(first), NAMED - names(first)
        assert value(first, "taskboard_claims_total", worker="metered", queue="default") == 3
        assert value(first, "taskboard_jobs", queue="default", state="completed") == 3
        # Every state is reported, zero when empty (issue 26), never left out.
        assert value(first, "taskboard_jobs", queue="default", state="pending") == 0
        assert value(first, "taskboard_database_up") == 1
        assert value(first, "taskboard_scrape_errors_total") == 0
        assert value(first, "taskboard_pickup_latency_seconds_count", worker="metered",
                     queue="default") == 3
        assert value(first, "taskboard_pool_connections", worker="metered", state="max") == 5
        assert value(first, "taskboard_capacity", worker="metered") == 7  # --concurrency

        # A job for later shows as scheduled; more jobs move every counter.
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("INSERT INTO taskboard_jobs (kind, queue, run_at)"
                      " VALUES ('noop', 'mail', now() + interval '1 hour')")
        insert_noops(db_url, 4, queue="mail")
        second = _poll(lambda: completed(7), "7 completions counted")
        assert value(second, "taskboard_claims_total", worker="metered", queue="mail") == 4
        assert value(second, "taskboard_jobs", queue="mail", state="completed") == 4
        assert value(second, "taskboard_jobs", queue="mail", state="scheduled") == 1
        assert value(second, "taskboard_outcomes_total", worker="metered",
                     outcome="completed") == 7
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]


def _poll(predicate: Any, what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_metrics_port_in_use_is_one_line_exit_2(db_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_cli(db_url, "worker", "--metrics-port", str(port))
    assert_one_line_error(proc, f"metrics: cannot listen on 127.0.0.1:{port}")
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM taskboard_workers").fetchone() == (0,)


# --- in process: the library's workers and the dashboard's fleet -------------------------


def test_a_scrape_reads_the_database_after_the_counters(db_url: str) -> None:
    # Events are emitted after their statement committed: read in this order, the job
    # counts of one scrape are never behind the counters printed beside them (read first,
    # CI's busy host once scraped 3 completions counted and none in taskboard_jobs).
    order = [f.name for f in Metrics(db_url).registry.collect()]
    database = order.index("taskboard_jobs")
    assert all(order.index(n) < database for n in
               ("taskboard_claims", "taskboard_completions", "taskboard_outcomes")), order


async def test_in_process_workers_feed_the_same_series(db_url: str, conn: Any) -> None:
    metrics = Metrics(db_url)
    server = serve_metrics(metrics, 0)
    try:
        rec = Recorder()
        async with run_workers(db_url, "a", "b", recorder=rec, lease_seconds=5) as running:
            running[0].worker.bus.subscribe(metrics)  # the bus both workers share
            await enqueue_many(conn, builtin_registry(), [NewJob("noop") for _ in range(10)])
            await wait_for(lambda: len(rec.of(Completed)) == 10, what="10 completed")
            scraped = await asyncio.to_thread(fetch, server.url)
        claims = sum(v for (name, _), v in scraped.items() if name == "taskboard_claims_total")
        done = sum(v for (name, _), v in scraped.items() if name == "taskboard_completions_total")
        assert (claims, done) == (10, 10)
        assert value(scraped, "taskboard_jobs", queue="default", state="completed") == 10
    finally:
        server.close()


async def test_the_dashboards_fleet_serves_metrics_for_its_embedded_workers(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKBOARD_DATABASE_URL", db_url)
    options = FleetOptions(
        workers=1,
        settings=WorkerSettings(lease_seconds=5, pool_size=4, drain_seconds=1),
        metrics_port=0,
    )
    async with open_fleet(options) as opened:
        assert opened.metrics_url is not None
        await opened.fleet.enqueue_sample("noop")

        async def counted() -> dict[Any, float] | None:
            scraped = await asyncio.to_thread(fetch, str(opened.metrics_url))
            done = [v for (name, _), v in scraped.items() if name == "taskboard_completions_total"]
            pool = [v for (name, _), v in scraped.items() if name == "taskboard_pool_connections"]
            return scraped if done == [1] and pool else None

        scraped = await wait_for(counted, what="the embedded worker's completion")
        assert NAMED <= names(scraped)
        assert value(scraped, "taskboard_jobs", queue="default", state="completed") == 1
    with pytest.raises(OSError):  # closed with the fleet
        await asyncio.to_thread(fetch, str(opened.metrics_url))


def test_the_dashboard_refuses_a_bad_metrics_port_in_one_line(db_url: str) -> None:
    env = {**os.environ, "TASKBOARD_DATABASE_URL": db_url}
    proc = subprocess.run(
        [*CLI[:2], "taskboard.tui.main", "--metrics-port", "70000"], env=env,
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert_one_line_error(proc, "--metrics-port must be between 0 and 65535")


# --- a database that does not answer -----------------------------------------------------


def test_a_scrape_without_the_database_serves_the_rest_and_counts_the_miss(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics("postgresql://maya:hunter2-secret@127.0.0.1:1/app", scrape_timeout=1)
    metrics(Claimed("w", 1, "noop", "t", 1, datetime.now(UTC), queue="default"))
    first = samples(metrics.render().decode())
    second = samples(metrics.render().decode())
    assert value(first, "taskboard_claims_total", worker="w", queue="default") == 1
    assert "taskboard_jobs" not in names(first)
    assert value(first, "taskboard_database_up") == 0
    assert value(first, "taskboard_scrape_errors_total") == 1  # counted in the same scrape
    assert value(second, "taskboard_scrape_errors_total") == 2
    assert "hunter2-secret" not in caplog.text


def test_a_database_that_accepts_but_never_answers_does_not_hold_the_scrape() -> None:
    with socket.socket() as frozen:  # accepts connections, never says a word
        frozen.bind(("127.0.0.1", 0))
        frozen.listen()
        port = frozen.getsockname()[1]
        metrics = Metrics(f"postgresql://maya@127.0.0.1:{port}/app", scrape_timeout=0.5)
        started = time.monotonic()
        scraped = samples(metrics.render().decode())
        took = time.monotonic() - started
    assert took < 1.5, took
    assert value(scraped, "taskboard_scrape_errors_total") == 1
    assert value(scraped, "taskboard_database_up") == 0


async def test_render_from_async_code_reads_the_counts(db_url: str, conn: Any) -> None:
    await enqueue_many(conn, builtin_registry(), [NewJob("noop"), NewJob("noop", queue="q")])
    scraped = samples(Metrics(db_url).render().decode())  # on a running loop: a helper thread
    assert value(scraped, "taskboard_jobs", queue="default", state="pending") == 1
    assert value(scraped, "taskboard_jobs", queue="q", state="pending") == 1


# --- the subscriber's arithmetic ---------------------------------------------------------


def test_each_event_moves_its_series() -> None:
    m = Metrics()  # no database: worker series only
    now = datetime.now(UTC)
    m(WorkerStarted("w", capacity=8, lease_seconds=60))
    m(Claimed("w", 1, "noop", "t1", 1, now, queue="mail", pickup_seconds=0.02))
    m(Claimed("w", 2, "noop", "t2", 2, now, previous_token="t0", previous_worker="x",
              queue="mail", pickup_seconds=3.0))
    m(Renewed("w", (1, 2), now, lateness=0.07))
    m(Completed("w", 1, "t1", seconds=0.5))
    m(CompletionRejected("w", 2, "t2"))
    m(RenewalFailed("w", 3, "t3", "token changed"))
    m(LeaseGivenUp("w", 3, "t3", "local deadline passed"))
    m(Dead("w", 4, "t4", "boom"))
    m(PoolStats("w", pool_max=10, in_use=3, idle=7, waiting=0, in_flight=2, capacity=8))
    s = samples(m.render().decode())
    assert value(s, "taskboard_claims_total", worker="w", queue="mail") == 2
    assert value(s, "taskboard_reclaims_total", worker="w") == 1
    assert value(s, "taskboard_completions_total", worker="w") == 1
    assert value(s, "taskboard_rejected_completions_total", worker="w") == 1
    assert value(s, "taskboard_renewal_failures_total", worker="w") == 1
    assert value(s, "taskboard_lost_leases_total", worker="w") == 1
    assert value(s, "taskboard_outcomes_total", worker="w", outcome="dead") == 1
    assert value(s, "taskboard_renewal_lateness_seconds_count", worker="w") == 1
    assert value(s, "taskboard_renewal_lateness_seconds_bucket", worker="w", le="0.05") == 0
    assert value(s, "taskboard_renewal_lateness_seconds_bucket", worker="w", le="0.1") == 1
    assert value(s, "taskboard_pickup_latency_seconds_bucket", worker="w", queue="mail",
                 le="0.025") == 1
    assert value(s, "taskboard_pickup_latency_seconds_sum", worker="w", queue="mail") == 3.02
    assert value(s, "taskboard_job_duration_seconds_count", worker="w") == 1
    assert value(s, "taskboard_pool_connections", worker="w", state="in_use") == 3
    assert value(s, "taskboard_pool_connections", worker="w", state="idle") == 7
    assert value(s, "taskboard_in_flight", worker="w") == 2
    m(WorkerStopped("w", "stopped"))
    s = samples(m.render().decode())
    assert value(s, "taskboard_in_flight", worker="w") is None  # a stopped worker's gauges go
    assert value(s, "taskboard_claims_total", worker="w", queue="mail") == 2  # counters stay


def test_metrics_are_served_on_loopback_unless_told_otherwise() -> None:
    from taskboard.core.cli import build_parser
    from taskboard.core.runtime.metrics import DEFAULT_HOST

    args = build_parser().parse_args(["worker", "--metrics-port", "9464"])
    assert args.metrics_host == DEFAULT_HOST == "127.0.0.1"


def test_two_metrics_in_one_process_do_not_collide() -> None:
    a, b = Metrics(), Metrics()
    a(Completed("w", 1, "t", seconds=0.1))
    assert value(samples(a.render().decode()), "taskboard_completions_total", worker="w") == 1
    assert value(samples(b.render().decode()), "taskboard_completions_total", worker="w") is None
