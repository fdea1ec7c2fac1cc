"""Worker settings: defaults, environment, validation, and masking of secrets for display."""

from __future__ import annotations

import math
import os
import random
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from taskboard.core.errors import ConfigError

DEFAULT_LEASE_SECONDS = 60.0
DEFAULT_POOL_SIZE = 10
# Connections a worker never hands to a job: one for lease renewal, one for control
# (LISTEN, heartbeat, pause/drain requests). Without them, handlers that block their
# connection (billing waiting on Stripe) would starve renewal and leases would expire in a
# live process.
RESERVED_CONNECTIONS = 2
DEFAULT_POLL_SECONDS = 5.0
DEFAULT_HEARTBEAT_SECONDS = 1.0
DEFAULT_DRAIN_SECONDS = 10.0
DEFAULT_RETRY_BASE_SECONDS = 2.0
DEFAULT_RETRY_MAX_SECONDS = 600.0


@dataclass(frozen=True)
class WorkerSettings:
    """How one worker runs. Validated on construction: bad values raise `ConfigError`."""

    lease_seconds: float = DEFAULT_LEASE_SECONDS
    renew_every: float | None = None  # default lease / 3
    pool_size: int = DEFAULT_POOL_SIZE
    queues: tuple[str, ...] = ("default",)
    poll_seconds: float = DEFAULT_POLL_SECONDS
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS
    drain_seconds: float = DEFAULT_DRAIN_SECONDS
    retry_base_seconds: float = DEFAULT_RETRY_BASE_SECONDS
    retry_max_seconds: float = DEFAULT_RETRY_MAX_SECONDS
    worker_id: str = field(default_factory=lambda: default_worker_id())

    def __post_init__(self) -> None:
        if not _positive(self.lease_seconds):
            raise ConfigError(
                f"lease must be a positive number of seconds, got {self.lease_seconds}"
            )
        if self.renew_every is not None and (
            not _positive(self.renew_every) or self.renew_every >= self.lease_seconds
        ):
            raise ConfigError(
                f"renewal interval must be positive and shorter than the lease "
                f"({self.lease_seconds:g} s), got {self.renew_every}"
            )
        if self.pool_size < RESERVED_CONNECTIONS + 1:
            raise ConfigError(
                f"pool size must be at least {RESERVED_CONNECTIONS + 1} "
                f"({RESERVED_CONNECTIONS} connections are reserved for renewal and control), "
                f"got {self.pool_size}"
            )
        if not _positive(self.poll_seconds) or not _positive(self.heartbeat_seconds):
            raise ConfigError("poll and heartbeat intervals must be positive")
        if not (0 <= self.retry_base_seconds <= self.retry_max_seconds):
            raise ConfigError("retry backoff must satisfy 0 <= base <= max")
        if self.drain_seconds < 0:
            raise ConfigError(f"drain timeout must be >= 0, got {self.drain_seconds}")
        if not self.queues or any(not q for q in self.queues):
            raise ConfigError("at least one non-empty queue name is required")
        if not re.fullmatch(r"[\w.@:-]{1,100}", self.worker_id):
            raise ConfigError(
                f"worker id must be 1-100 letters, digits or . _ @ : -, got {self.worker_id!r}"
            )

    @property
    def renewal_interval(self) -> float:
        """Seconds between renewals: the configured value or a third of the lease."""
        return self.renew_every if self.renew_every is not None else self.lease_seconds / 3

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds before retry `attempt + 1`: exponential, capped, with jitter.

        Half the delay is fixed and half random ("equal jitter"), so retries of jobs that
        failed together (an SMTP outage) spread out instead of hitting the server at once.
        """
        delay = min(self.retry_max_seconds, self.retry_base_seconds * 2.0 ** max(0, attempt - 1))
        return float(delay / 2 + (rng or random).uniform(0, delay / 2))

    @property
    def capacity(self) -> int:
        """Jobs this worker may hold at once: pool size minus the reserved connections."""
        return self.pool_size - RESERVED_CONNECTIONS


def _positive(value: float) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def default_worker_id() -> str:
    """`host-pid`, readable on the dashboard and unique per process on one host."""
    return f"{socket.gethostname()}-{os.getpid()}"


def database_url_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """`TASKBOARD_DATABASE_URL`, else `DATABASE_URL`, else None (use the embedded server)."""
    env = os.environ if env is None else env
    return env.get("TASKBOARD_DATABASE_URL") or env.get("DATABASE_URL") or None


_PASSWORD_KV = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def mask_dsn(dsn: str) -> str:
    """The DSN with any password replaced by `***`, for screens, logs and errors."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user, _, password = userinfo.partition(":")
            if password:
                userinfo = user + ":***"
            netloc = f"{userinfo}@{host}"
        query = _PASSWORD_KV.sub(r"\1***", parts.query.replace("&", " ")).replace(" ", "&")
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    return _PASSWORD_KV.sub(r"\1***", dsn)
