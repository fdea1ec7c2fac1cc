"""Settings validation, secret masking and retry backoff."""

from __future__ import annotations

import random

import pytest
from taskboard.core.base.errors import ConfigError
from taskboard.core.base.secrets import mask_dsn
from taskboard.core.engine.settings import (
    DEFAULT_CONCURRENCY,
    DEFAULT_ENGINE_CONNECTIONS,
    WorkerSettings,
    usable_cores,
)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lease_seconds": 0}, "lease must be between 1 and 86400"),
        ({"lease_seconds": float("nan")}, "lease must be between 1 and 86400"),
        # Below a second, healthy jobs died "stopped renewing" while renewing.
        ({"lease_seconds": 0.01}, "lease must be between 1 and 86400"),
        # make_interval fails inside every claim: the worker never claimed.
        ({"lease_seconds": 1e300}, "lease must be between 1 and 86400"),
        ({"lease_seconds": 10, "renew_every": 10}, "renewal interval"),
        ({"lease_seconds": 10, "renew_every": 6}, "at most half the lease"),
        ({"lease_seconds": 10, "renew_every": -1}, "renewal interval"),
        ({"lease_seconds": 10, "renew_every": 1e-9}, "renewal interval"),  # a busy loop
        ({"pool_size": 2}, "pool size must be between 3 and 1000"),
        ({"pool_size": 100_000}, "pool size must be between 3 and 1000"),
        ({"queues": ()}, "queue"),
        ({"queues": ("mail\nbox",)}, "line break or control character"),
        ({"queues": ("",)}, "must not be empty"),
        ({"queues": (" padded",)}, "starts or ends with a space"),
        ({"worker_id": "has space"}, "worker id"),
        ({"retry_base_seconds": 5, "retry_max_seconds": 1}, "retry base"),
        # The FAIL statement itself errored at 1e13, and the error was never recorded.
        ({"retry_base_seconds": 1e13, "retry_max_seconds": 1e13}, "retry cap"),
        ({"retry_base_seconds": 1e9}, "retry base must be between 0 and 600"),
        ({"poll_seconds": 0}, "fallback poll"),
        ({"drain_seconds": float("inf")}, "drain timeout"),
    ],
)
def test_bad_settings_are_refused_with_the_reason(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        WorkerSettings(**kwargs)


def test_defaults_follow_the_design():
    s = WorkerSettings(worker_id="w")
    # DESIGN.md: pool 10, so at most 8 jobs in flight that hold a connection, 7 on a host
    # with two cores or more (a second engine connection); handlers that write nothing
    # need none and run up to `concurrency` at once, 100 per engine connection.
    assert (s.lease_seconds, s.renewal_interval, s.pool_size) == (60, 20, 10)
    engines = DEFAULT_ENGINE_CONNECTIONS
    assert engines == (2 if usable_cores() >= 2 else 1)
    assert (s.engine_connection_count, s.reserved_connections) == (engines, engines + 1)
    assert (s.connection_slots, s.capacity) == (9 - engines, DEFAULT_CONCURRENCY)
    assert DEFAULT_CONCURRENCY == 100 * engines
    assert s.retry_max_seconds == 600  # the README's cap, whatever the base


def test_engine_connections_count_against_the_pool():
    one = WorkerSettings(worker_id="w", engine_connections=1)
    two = WorkerSettings(worker_id="w", engine_connections=2)
    assert (one.reserved_connections, one.connection_slots) == (2, 8)
    assert (two.reserved_connections, two.connection_slots) == (3, 7)
    # A pool under the default keeps its handler slots: one engine connection.
    assert WorkerSettings(worker_id="w", pool_size=3).engine_connection_count == 1
    assert WorkerSettings(worker_id="w", pool_size=9).connection_slots == 7
    with pytest.raises(ConfigError, match="pool size must be at least 4 with 2 engine"):
        WorkerSettings(worker_id="w", pool_size=3, engine_connections=2)
    for bad in (0, 3, True, 1.5):
        with pytest.raises(ConfigError, match="engine connections must be 1 or 2"):
            WorkerSettings(worker_id="w", engine_connections=bad)


def test_default_concurrency_is_100_per_engine_connection_held():
    # A pool under the default keeps one engine connection, so one group of 100 at a time:
    # 200 there (the host's two-core default) made one worker claim a 2,000-job backlog in
    # ~0.2 s in groups of 200, more than the design's 100 per connection.
    assert WorkerSettings(worker_id="w", pool_size=6).capacity == 100
    assert WorkerSettings(worker_id="w", engine_connections=1).capacity == 100
    assert WorkerSettings(worker_id="w", engine_connections=2).capacity == 200
    assert WorkerSettings(worker_id="w", pool_size=6, concurrency=200).capacity == 200
    assert WorkerSettings(worker_id="w", pool_size=6, concurrency=3).connection_slots == 3
    assert WorkerSettings(worker_id="w", pool_size=6).connection_slots == 4


def test_timeouts_sit_well_under_the_renewal_interval():
    for lease in (1, 2, 10, 60, 86_400):
        s = WorkerSettings(worker_id="w", lease_seconds=lease)
        assert s.lock_timeout < s.statement_timeout <= s.renewal_interval / 2 or lease > 30
        assert s.statement_timeout <= 5
        # The local deadline falls before the database's, by a margin.
        assert 0 < s.deadline_margin <= min(2.0, lease / 10)
        assert s.answer_timeout < lease


@pytest.mark.parametrize(
    ("dsn", "masked"),
    [
        ("postgresql://maya:s3cr3t@db:5432/app", "postgresql://maya:***@db:5432/app"),
        ("postgresql://maya@db/app?password=s3cr3t&sslmode=require",
         "postgresql://maya@db/app?password=***&sslmode=require"),
        ("host=db user=maya password=s3cr3t", "host=db user=maya password=***"),
        ("host=db user=maya password='s3 cr3t'", "host=db user=maya password=***"),
        ("postgresql://postgres:@/postgres?host=/tmp/x", "postgresql://postgres:@/postgres?host=/tmp/x"),
    ],
)
def test_dsn_passwords_are_masked(dsn, masked):
    assert mask_dsn(dsn) == masked


def test_backoff_grows_exponentially_with_bounded_jitter():
    s = WorkerSettings(worker_id="w", retry_base_seconds=2, retry_max_seconds=60)
    rng = random.Random(7)
    for attempt, full in [(1, 2), (2, 4), (3, 8), (4, 16), (10, 60)]:
        delays = [s.backoff(attempt, rng) for _ in range(200)]
        assert all(full / 2 <= d <= full for d in delays)
        assert max(delays) - min(delays) > full / 4  # really jittered


def test_backoff_of_a_huge_attempt_number_stays_at_the_cap():
    s = WorkerSettings(worker_id="w", retry_base_seconds=2, retry_max_seconds=600)
    assert 300 <= s.backoff(10_000) <= 600
