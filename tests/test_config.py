"""Settings validation, secret masking and retry backoff."""

from __future__ import annotations

import random

import pytest
from taskboard.core.engine.settings import WorkerSettings, mask_dsn
from taskboard.core.errors import ConfigError


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lease_seconds": 0}, "lease must be a positive"),
        ({"lease_seconds": float("nan")}, "lease must be a positive"),
        ({"lease_seconds": 10, "renew_every": 10}, "renewal interval"),
        ({"lease_seconds": 10, "renew_every": -1}, "renewal interval"),
        ({"pool_size": 2}, "pool size must be at least 3"),
        ({"queues": ()}, "queue"),
        ({"worker_id": "has space"}, "worker id"),
        ({"retry_base_seconds": 5, "retry_max_seconds": 1}, "backoff"),
    ],
)
def test_bad_settings_are_refused_with_the_reason(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        WorkerSettings(**kwargs)


def test_defaults_follow_the_design():
    s = WorkerSettings(worker_id="w")
    assert (s.lease_seconds, s.renewal_interval, s.pool_size, s.capacity) == (60, 20, 10, 8)


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
