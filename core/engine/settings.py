"""Worker settings: defaults, bounds, and the timings derived from the lease.

Every bound exists because a value outside it broke something: a lease of 1e300 seconds
makes `make_interval` fail inside every claim; a renewal interval of a nanosecond is a busy
loop; a retry base of 1e13 seconds makes the failure statement itself fail; a pool of
100,000 takes every free connection slot of the server. Bad values raise `ConfigError`
with one line naming the setting (exit code 2 from the command line).
"""

from __future__ import annotations

import math
import os
import random
import re
import socket
from dataclasses import dataclass, field

from taskboard.core.base import libpq_settings
from taskboard.core.base.cores import usable_cores as usable_cores  # re-exported
from taskboard.core.base.errors import ConfigError
from taskboard.core.base.names import check_queue_name as check_queue_name  # re-exported
from taskboard.core.kinds.policy import KindPolicy

DEFAULT_LEASE_SECONDS = 60.0
MIN_LEASE_SECONDS = 1.0
MAX_LEASE_SECONDS = 86_400.0
MIN_RENEW_SECONDS = 0.1
# Connections a worker never hands to a job: the engine connection (claims, renewals,
# grouped completions, releases) and the control connection (LISTEN, heartbeat, operator
# requests). Without them, handlers that block their connection (billing waiting on
# Stripe) would starve renewal and leases would expire in a live process.
MIN_RESERVED_CONNECTIONS = 2
# A second engine connection, for grouped completions only (completer.py): one group is in
# the database while the worker reports and runs the other's jobs, so the worker and its
# server work at once instead of taking turns. It pays where both can run at once: one
# worker at its defaults ran 10-25% more no-op jobs/s on 2 cores (16-43% at 2 ms) and lost
# 5-7% pinned to one core (bench/results-overlap.md). So: two on a host with two or more
# usable cores, at pools of the default size or more (a smaller pool keeps its handlers).
MAX_ENGINE_CONNECTIONS = 2
DEFAULT_POOL_SIZE = 10
MAX_POOL_SIZE = 1000


DEFAULT_ENGINE_CONNECTIONS = MAX_ENGINE_CONNECTIONS if usable_cores() >= 2 else 1
# What any worker reserves, whatever its host (the dashboard shows workers of many hosts).
MAX_RESERVED_CONNECTIONS = MAX_ENGINE_CONNECTIONS + 1
# Jobs held at once. Only kinds that write to the database hold a connection each (at most
# pool - reserved of them); the others hold none, so their number is not tied to the pool.
# 100 per engine connection the worker holds (so 100 at a pool under the default, which
# keeps one): no-op groups of 50-100 per commit are where one worker's rate levels off
# (bench/), and two groups out at once need two cohorts of jobs (groups of 50 out of 100
# doubled the commits per job and lost, bench/results-overlap.md).
JOBS_PER_GROUP = 100
# At the default pool on this host.
DEFAULT_CONCURRENCY = JOBS_PER_GROUP * DEFAULT_ENGINE_CONNECTIONS
MAX_CONCURRENCY = 10_000
DEFAULT_POLL_SECONDS = 5.0
DEFAULT_HEARTBEAT_SECONDS = 1.0
DEFAULT_DRAIN_SECONDS = 10.0
MAX_DRAIN_SECONDS = 3600.0
DEFAULT_RETRY_BASE_SECONDS = 2.0
DEFAULT_RETRY_MAX_SECONDS = 600.0
MAX_RETRY_SECONDS = 7 * 86_400.0
MAX_QUEUES = 50
# Snoozes give the attempt back, so they are capped on their own: a job that snoozes in a
# loop (waiting for something that never comes) ends dead after this many instead of
# running, and writing an attempt row, for ever.
DEFAULT_MAX_SNOOZES = 100
MAX_SNOOZES_LIMIT = 1_000_000
# Payload bytes one claim may bring back (beyond its first row, always taken): 100 emails of
# 2 MB in one claim timed out at a 10 s lease, every time. 2 MiB fits in a loopback socket's
# buffers, so the server finishes the claim even while the worker's loop is busy (4 emails
# of 2 MB a claim still timed out at a 3 s lease while their handlers built messages); a
# hundred no-op jobs are a few kilobytes.
DEFAULT_CLAIM_BYTES = 2 * 1024 * 1024
MIN_CLAIM_BYTES = 1024
MAX_CLAIM_BYTES = 1024 * 1024 * 1024


@dataclass(frozen=True)
class WorkerSettings:
    """How one worker runs. Validated on construction: bad values raise `ConfigError`."""

    lease_seconds: float = DEFAULT_LEASE_SECONDS
    renew_every: float | None = None  # default lease / 3
    pool_size: int = DEFAULT_POOL_SIZE
    # Jobs at once (those that write: pool - reserved); None: 100 per engine connection.
    concurrency: int | None = None
    queues: tuple[str, ...] = ("default",)
    poll_seconds: float = DEFAULT_POLL_SECONDS
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS
    drain_seconds: float = DEFAULT_DRAIN_SECONDS
    retry_base_seconds: float = DEFAULT_RETRY_BASE_SECONDS
    retry_max_seconds: float = DEFAULT_RETRY_MAX_SECONDS
    burst: bool = False  # drain and stop as soon as nothing is ready and nothing is held
    claim_bytes: int = DEFAULT_CLAIM_BYTES  # payload bytes a claim may bring back
    # Retention (see taskboard.core.operations.retention): finished jobs older than these are pruned
    # by the workers themselves every `prune_every_seconds` (0: never; `taskboard prune`).
    keep_completed_seconds: float = 86_400.0
    keep_dead_seconds: float = 7 * 86_400.0
    keep_cancelled_seconds: float = 7 * 86_400.0
    prune_every_seconds: float = 60.0
    prune_batch: int = 500
    max_snoozes: int = DEFAULT_MAX_SNOOZES  # per job; the snooze past it makes the job dead
    engine_connections: int | None = None  # 1 or 2; None: `DEFAULT_ENGINE_CONNECTIONS`
    # where the pool is of the default size or more, else 1
    worker_id: str = field(default_factory=lambda: default_worker_id())

    def __post_init__(self) -> None:
        _between("lease", self.lease_seconds, MIN_LEASE_SECONDS, MAX_LEASE_SECONDS, "seconds")
        if self.renew_every is not None:
            _between(
                "renewal interval",
                self.renew_every,
                MIN_RENEW_SECONDS,
                self.lease_seconds / 2,
                "seconds (at most half the lease, so a failed renewal is retried in time)",
            )
        if isinstance(self.pool_size, bool) or not isinstance(self.pool_size, int):
            raise ConfigError(f"pool size must be a whole number, got {self.pool_size!r}")
        if not MIN_RESERVED_CONNECTIONS + 1 <= self.pool_size <= MAX_POOL_SIZE:
            raise ConfigError(
                f"pool size must be between {MIN_RESERVED_CONNECTIONS + 1} and {MAX_POOL_SIZE} "
                f"({MIN_RESERVED_CONNECTIONS} connections are reserved for the engine and "
                f"control), got {self.pool_size}"
            )
        if self.engine_connections is not None:
            if (
                isinstance(self.engine_connections, bool)
                or not isinstance(self.engine_connections, int)
                or not 1 <= self.engine_connections <= MAX_ENGINE_CONNECTIONS
            ):
                raise ConfigError(
                    f"engine connections must be 1 or {MAX_ENGINE_CONNECTIONS}, "
                    f"got {self.engine_connections!r}"
                )
            if self.pool_size < self.reserved_connections + 1:
                raise ConfigError(
                    f"pool size must be at least {self.reserved_connections + 1} with "
                    f"{self.engine_connections} engine connections, got {self.pool_size}"
                )
        if self.concurrency is not None:
            if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int):
                raise ConfigError(f"concurrency must be a whole number, got {self.concurrency!r}")
            if not 1 <= self.concurrency <= MAX_CONCURRENCY:
                raise ConfigError(
                    f"concurrency must be between 1 and {MAX_CONCURRENCY} jobs at once, "
                    f"got {self.concurrency}"
                )
        _between("fallback poll", self.poll_seconds, 0.05, 3600.0, "seconds")
        _between("heartbeat", self.heartbeat_seconds, 0.05, 60.0, "seconds")
        _between("drain timeout", self.drain_seconds, 0.0, MAX_DRAIN_SECONDS, "seconds")
        _between("retry cap", self.retry_max_seconds, 0.0, MAX_RETRY_SECONDS, "seconds")
        _between("retry base", self.retry_base_seconds, 0.0, self.retry_max_seconds,
                 "seconds (at most the retry cap)")
        for name in ("keep_completed_seconds", "keep_dead_seconds", "keep_cancelled_seconds"):
            _between(name.removesuffix("_seconds").replace("_", " "), getattr(self, name),
                     0.0, 10 * 365 * 86_400.0, "seconds")
        _between("prune interval", self.prune_every_seconds, 0.0, 86_400.0, "seconds")
        _between("prune batch", self.prune_batch, 1, 100_000, "rows")
        if isinstance(self.max_snoozes, bool) or not isinstance(self.max_snoozes, int):
            raise ConfigError(f"max snoozes must be a whole number, got {self.max_snoozes!r}")
        _between("max snoozes", self.max_snoozes, 0, MAX_SNOOZES_LIMIT, "per job")
        if isinstance(self.claim_bytes, bool) or not isinstance(self.claim_bytes, int):
            raise ConfigError(f"claim bytes must be a whole number, got {self.claim_bytes!r}")
        _between("claim bytes", self.claim_bytes, MIN_CLAIM_BYTES, MAX_CLAIM_BYTES, "bytes")
        if not self.queues or len(self.queues) > MAX_QUEUES:
            raise ConfigError(f"give between 1 and {MAX_QUEUES} queues")
        for queue in self.queues:
            check_queue_name(queue)
        if not re.fullmatch(r"[\w.@:-]{1,100}", self.worker_id, flags=re.ASCII):
            raise ConfigError(
                f"worker id must be 1-100 letters, digits or . _ @ : -, got {self.worker_id!r}"
            )

    @property
    def renewal_interval(self) -> float:
        """Seconds between renewals: the configured value or a third of the lease."""
        return self.renew_every if self.renew_every is not None else self.lease_seconds / 3

    @property
    def deadline_margin(self) -> float:
        """How much earlier than the database's deadline the worker's own deadline falls.

        The local deadline is (local time when the claim or renewal was *sent*) + lease -
        this margin; the database's is at least (sent + lease), so a worker stops acting
        before any other worker may reclaim, whatever the network took.
        """
        return margin_for(self.lease_seconds)

    def renewal_for(self, lease: float) -> float:
        """Seconds between renewals of a lease of `lease` seconds: this worker's interval
        for its own lease length, a third of any other (a kind's own)."""
        return self.renewal_interval if lease == self.lease_seconds else lease / 3

    @property
    def statement_timeout(self) -> float:
        """Server-side limit for the engine's and control's statements (seconds)."""
        return min(5.0, max(0.1, self.renewal_interval / 2))

    @property
    def lock_timeout(self) -> float:
        """Server-side limit on waiting for a row lock (engine statements skip locked rows;
        this only bounds what cannot)."""
        return self.statement_timeout / 2

    @property
    def answer_timeout(self) -> float:
        """How long the worker waits for an answer before it drops the connection: a
        frozen server never runs `statement_timeout`, so the client needs its own limit."""
        return 2 * self.statement_timeout + min(1.0, self.lease_seconds / 4)

    @property
    def startup_answer_timeout(self) -> float:
        """The answer limit of the statements a worker runs before its engine starts (room
        for the pool, the schema's version, registering): a connection can go silent then
        too, and the engine's limit, tight for short leases, would fail a cold backend on
        a busy host; so the longer of that and the time a connection may take to open."""
        return max(self.answer_timeout, float(libpq_settings.CONNECT_TIMEOUT_SECONDS))

    @property
    def retry_delay_cap(self) -> float:
        """Longest pause between two tries of a failing statement."""
        return min(1.0, self.lease_seconds / 4)

    def backoff(
        self,
        attempt: int,
        rng: random.Random | None = None,
        *,
        base: float | None = None,
        cap: float | None = None,
    ) -> float:
        """Seconds before retry `attempt + 1`: exponential, capped, with jitter; `base` and
        `cap` are a kind's own, None this worker's.

        Half the delay is fixed and half random ("equal jitter"), so retries of jobs that
        failed together (an SMTP outage) spread out instead of hitting the server at once.
        """
        exponent = min(max(0, attempt - 1), 60)  # 2**60 s is past any cap already
        base = self.retry_base_seconds if base is None else base
        cap = self.retry_max_seconds if cap is None else cap
        delay = min(cap, base * 2.0**exponent)
        return float(delay / 2 + (rng or random).uniform(0, delay / 2))

    def backoff_for(self, kind: KindPolicy | None, attempt: int) -> float:
        """`backoff` with the kind's own retry base and cap, where it sets them."""
        if kind is None:
            return self.backoff(attempt)
        return self.backoff(attempt, base=kind.retry_base_seconds, cap=kind.retry_max_seconds)

    @property
    def capacity(self) -> int:
        """Jobs this worker may hold at once: `concurrency`, else 100 per engine connection
        (a worker that keeps one, on one core or a small pool, is sized as before the second)."""
        if self.concurrency is not None:
            return self.concurrency
        return JOBS_PER_GROUP * self.engine_connection_count

    @property
    def engine_connection_count(self) -> int:
        """Engine connections this worker holds: as set, else two on a host with two or
        more cores and a pool of the default size or more (see `MAX_ENGINE_CONNECTIONS`)."""
        if self.engine_connections is not None:
            return self.engine_connections
        if self.pool_size < DEFAULT_POOL_SIZE:
            return 1
        return DEFAULT_ENGINE_CONNECTIONS

    @property
    def reserved_connections(self) -> int:
        """Pool connections never handed to a job: the engine connections and control."""
        return self.engine_connection_count + 1

    @property
    def connection_slots(self) -> int:
        """Jobs of kinds that write to the database this worker may hold at once: each
        holds a pool connection, and the engine and control ones are reserved."""
        return min(self.capacity, self.pool_size - self.reserved_connections)


def margin_for(lease: float) -> float:
    """How much earlier than the database's deadline a lease's local deadline falls."""
    return min(2.0, lease * 0.1)


def _between(name: str, value: object, low: float, high: float, unit: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or not low <= value <= high:
        raise ConfigError(f"{name} must be between {low:g} and {high:g} {unit}, got {value:g}")


def default_worker_id() -> str:
    """`host-pid`, readable on the dashboard and unique per process on one host."""
    host = re.sub(r"[^\w.@:-]", "-", socket.gethostname(), flags=re.ASCII)[:80] or "host"
    return f"{host}-{os.getpid()}"
