"""Prometheus metrics for one process: what its workers do, and the jobs in the database.

`Metrics` is an `EventBus` subscriber (`bus.subscribe(metrics)`) with a registry of its own
(never prometheus_client's global one, so two `Metrics` in one process, as in the tests,
never collide). Events arrive on the workers' event loop, which in the dashboard is
another thread than the one serving scrapes: each event costs one or two locked
increments, nothing more. `taskboard_jobs` is read at scrape time, on the HTTP server's
thread, by one short query on a connection opened for it and closed after it, bounded by
`scrape_timeout` seconds on both sides (server-side `statement_timeout`, and a client-side
limit that closes the socket: a frozen server never runs `statement_timeout`). When the
database does not answer, the scrape still serves every other series and counts the miss
in `taskboard_scrape_errors_total`.

Series (label sets in braces):

    taskboard_jobs{queue,state}                      gauge, at scrape time; state is pending,
                                                     scheduled, running, completed, dead or
                                                     cancelled (finished ones from the counts
                                                     the trigger keeps: no scan)
    taskboard_kind_limited_jobs{kind}                gauge, at scrape time: due jobs of a kind
                                                     with a fleet limit, not claimed yet
    taskboard_database_up                            gauge, 1 if the last scrape read the counts
    taskboard_scrape_errors_total                    counter
    taskboard_claims_total{worker,queue}             counter
    taskboard_reclaims_total{worker}                 counter, claims of an expired lease
    taskboard_completions_total{worker}              counter
    taskboard_rejected_completions_total{worker}     counter, stale token: not ours any more
    taskboard_lost_leases_total{worker}              counter, attempts given up (lease lost)
    taskboard_renewal_failures_total{worker}         counter, leases a renewal could not extend
    taskboard_read_only_departures_total{worker}     counter, servers left because their
                                                     sessions turned read-only
    taskboard_outcomes_total{worker,outcome}         counter, every end of an attempt
    taskboard_steps_total{kind,outcome}              counter, durable steps: recorded,
                                                     replayed, or rejected by the fence
    taskboard_renewal_lateness_seconds{worker}       histogram
    taskboard_pickup_latency_seconds{worker,queue}   histogram, due -> claimed (database clock)
    taskboard_job_duration_seconds{worker}           histogram, claim -> completion
    taskboard_pool_connections{worker,state}         gauge, state max/in_use/idle/waiting
    taskboard_in_flight{worker}                      gauge
    taskboard_capacity{worker}                       gauge
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import start_http_server
from taskboard.core.base.errors import ConfigError
from taskboard.core.engine.events import (
    Cancelled,
    Claimed,
    Completed,
    CompletionRejected,
    Dead,
    Event,
    Failed,
    LeaseGivenUp,
    LeftReadOnlyServer,
    PoolStats,
    Released,
    RenewalFailed,
    Renewed,
    Snoozed,
    StepCheckpoint,
    WorkerStarted,
    WorkerStopped,
)
from taskboard.core.runtime.metrics_jobs import JobsCollector

DEFAULT_HOST = "127.0.0.1"
DEFAULT_SCRAPE_TIMEOUT = 2.0
LATENESS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
PICKUP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                  300.0)
DURATION_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)

_OUTCOMES: dict[type[Event], str] = {
    Completed: "completed",
    CompletionRejected: "rejected",
    Failed: "failed",
    Dead: "dead",
    LeaseGivenUp: "lost",
    Released: "released",
    Cancelled: "cancelled",
    Snoozed: "snoozed",
}
_WORKER_GAUGES = ("pool", "in_flight", "capacity")


class Metrics:
    """The series of one process's workers; subscribe it to their `EventBus`."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        registry: CollectorRegistry | None = None,
        scrape_timeout: float = DEFAULT_SCRAPE_TIMEOUT,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.jobs = JobsCollector(database_url, scrape_timeout) if database_url else None
        self.claims = Counter("taskboard_claims", "Jobs claimed", ["worker", "queue"], registry=r)
        self.reclaims = Counter("taskboard_reclaims", "Claims that took over an expired lease",
                                ["worker"], registry=r)
        self.completions = Counter("taskboard_completions", "Fenced completions that changed "
                                   "the job", ["worker"], registry=r)
        self.rejected = Counter("taskboard_rejected_completions", "Completions refused by the "
                                "fence (stale token)", ["worker"], registry=r)
        self.lost = Counter("taskboard_lost_leases", "Attempts given up because the lease was "
                            "lost or its local deadline passed", ["worker"], registry=r)
        self.renewal_failures = Counter("taskboard_renewal_failures", "Leases a renewal could "
                                        "not extend", ["worker"], registry=r)
        self.read_only_departures = Counter(
            "taskboard_read_only_departures", "Servers left because their sessions turned "
            "read-only", ["worker"], registry=r)
        self.outcomes = Counter("taskboard_outcomes", "Attempts ended, by outcome",
                                ["worker", "outcome"], registry=r)
        self.steps = Counter("taskboard_steps", "Durable steps: recorded, replayed, or "
                             "rejected by the fence", ["kind", "outcome"], registry=r)
        self.lateness = Histogram("taskboard_renewal_lateness_seconds", "How late each renewal "
                                  "statement ran after it was due", ["worker"],
                                  buckets=LATENESS_BUCKETS, registry=r)
        self.pickup = Histogram("taskboard_pickup_latency_seconds", "From when a job was due "
                                "to its claim (database clock)", ["worker", "queue"],
                                buckets=PICKUP_BUCKETS, registry=r)
        self.duration = Histogram("taskboard_job_duration_seconds", "From claim to fenced "
                                  "completion", ["worker"], buckets=DURATION_BUCKETS, registry=r)
        self.pool = Gauge("taskboard_pool_connections", "Connections of the worker's pool",
                          ["worker", "state"], registry=r)
        self.in_flight = Gauge("taskboard_in_flight", "Jobs the worker holds", ["worker"],
                               registry=r)
        self.capacity = Gauge("taskboard_capacity", "Jobs the worker may hold at once",
                              ["worker"], registry=r)
        # Registered last, so a scrape reads the database after the counters: an event is
        # emitted only after its statement committed, so `taskboard_jobs` in one scrape is
        # never behind the counters beside it (read first, a count taking a new connection
        # on a busy host missed completions the counters already had).
        if self.jobs is not None:
            r.register(self.jobs)

    def __call__(self, event: Event) -> None:
        """Count one event (called on the workers' loop: cheap, thread-safe, never raises
        past the bus, which logs and drops a subscriber's error anyway)."""
        w = event.worker_id
        if isinstance(event, Claimed):
            self.claims.labels(w, event.queue).inc()
            self.pickup.labels(w, event.queue).observe(max(0.0, event.pickup_seconds))
            if event.is_reclaim:
                self.reclaims.labels(w).inc()
        elif isinstance(event, Renewed):
            self.lateness.labels(w).observe(max(0.0, event.lateness))
        elif isinstance(event, RenewalFailed):
            self.renewal_failures.labels(w).inc()
        elif isinstance(event, LeftReadOnlyServer):
            self.read_only_departures.labels(w).inc()
        elif isinstance(event, PoolStats):
            for state, value in (("max", event.pool_max), ("in_use", event.in_use),
                                 ("idle", event.idle), ("waiting", event.waiting)):
                self.pool.labels(w, state).set(value)
            self.in_flight.labels(w).set(event.in_flight)
            self.capacity.labels(w).set(event.capacity)
        elif isinstance(event, WorkerStarted):
            self.capacity.labels(w).set(event.capacity)
            self.in_flight.labels(w).set(0)
        elif isinstance(event, WorkerStopped):
            self._forget(w)
        elif isinstance(event, StepCheckpoint):
            self.steps.labels(event.kind, event.outcome).inc()
        outcome = _OUTCOMES.get(type(event))
        if outcome is not None:
            self._ended(event, outcome)

    def _ended(self, event: Event, outcome: str) -> None:
        w = event.worker_id
        self.outcomes.labels(w, outcome).inc()
        if isinstance(event, Completed):
            self.completions.labels(w).inc()
            self.duration.labels(w).observe(max(0.0, event.seconds))
        elif isinstance(event, CompletionRejected):
            self.rejected.labels(w).inc()
        elif isinstance(event, LeaseGivenUp):
            self.lost.labels(w).inc()

    def _forget(self, worker: str) -> None:
        """A stopped worker's gauges go (its counters stay: they only ever grow)."""
        for state in ("max", "in_use", "idle", "waiting"):
            with contextlib.suppress(KeyError):
                self.pool.remove(worker, state)
        for gauge in (self.in_flight, self.capacity):
            with contextlib.suppress(KeyError):
                gauge.remove(worker)

    def render(self) -> bytes:
        """The Prometheus text exposition of every series, as a scrape gets it."""
        return generate_latest(self.registry)


@dataclass
class MetricsServer:
    """The HTTP server answering scrapes (on a daemon thread of its own)."""

    host: str
    port: int
    _server: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        """Where to scrape."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop answering and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def check_port(port: int) -> int:
    """A TCP port, 0 (any free one) to 65535; `ConfigError` otherwise."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"metrics port must be between 0 and 65535, got {port!r}")
    return port


def serve_metrics(metrics: Metrics, port: int, host: str = DEFAULT_HOST) -> MetricsServer:
    """Serve `metrics` on http://host:port/metrics (any path answers); `ConfigError` if the
    address cannot be bound. Loopback by default: binding elsewhere is the caller's choice."""
    check_port(port)
    try:
        server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise ConfigError(f"metrics: cannot listen on {host}:{port} ({reason})") from None
    return MetricsServer(host, int(server.server_address[1]), server, thread)
