"""Per-kind policies: a kind's own lease (stamped at claim, renewed at its own length,
enforced by the local deadline), its max_attempts at enqueue and its retry backoff."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from taskboard.core import JobKind, KindRegistry, NewJob
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.queue.jobs import validate_job

from tests import worker_procs as wp

LEASE = """SELECT extract(epoch FROM lease_expires_at - claimed_at), claimed_by, claim_count,
                  lease_expires_at
             FROM taskboard_jobs WHERE kind = %s"""


def test_a_kinds_short_lease_is_stamped_renewed_and_reclaimed_beside_a_long_one(
    db_url: str, tmp_path: Path
) -> None:
    wp.enqueue(db_url, "brief", 1, seconds=60)  # lease_seconds=2 on the kind
    wp.enqueue(db_url, "long", 1, seconds=60)  # the worker's --lease 60
    with wp.workers(db_url, tmp_path, 1, "--lease", "60", "--drain-timeout", "0",
                    prefix="a") as (holder,):
        wp.until(db_url, "SELECT count(*) = 2 FROM taskboard_jobs WHERE claimed_by = 'a0'",
                 timeout=20)
        brief, long = wp.one(db_url, LEASE, "brief"), wp.one(db_url, LEASE, "long")
        assert 1.9 <= brief[0] <= 2.5 and 59.9 <= long[0] <= 60.5, (brief, long)
        # Renewed at its own length (every ~0.67 s), not the worker's 60 s.
        wp.until(db_url, "SELECT lease_expires_at > %s + interval '0.3 s'"
                 " AND lease_expires_at < now() + interval '2.1 s'"
                 " FROM taskboard_jobs WHERE kind = 'brief'", brief[3], timeout=10)
        holder.send_signal(signal.SIGSTOP)  # a stalled holder: no renewal, no completion
        stalled = time.monotonic()
        with wp.workers(db_url, tmp_path, 1, "--lease", "60", "--drain-timeout", "0",
                        prefix="b"):
            wp.until(db_url, "SELECT claimed_by = 'b0' AND claim_count = 2"
                     " FROM taskboard_jobs WHERE kind = 'brief'", timeout=15)
            took = time.monotonic() - stalled
            assert took < 8, f"the 2 s lease was reclaimed only after {took:.1f} s"
            # The 60 s kind beside it is untouched: still the stalled worker's first claim.
            assert wp.one(db_url, LEASE, "long")[1:3] == ("a0", 1)
            # The running attempt's row is written when it ends (migration 15): read from
            # its job row until then.
            history = wp.rows(db_url, "SELECT a.worker_id, a.outcome FROM taskboard_attempts a"
                              " JOIN taskboard_jobs j ON j.id = a.job_id"
                              " WHERE j.kind = 'brief'"
                              " UNION ALL SELECT claimed_by, NULL FROM taskboard_jobs"
                              " WHERE kind = 'brief' AND lease_token IS NOT NULL"
                              " ORDER BY 1")
            assert history == [("a0", "lease_lost"), ("b0", None)]


def test_a_kinds_max_attempts_is_the_default_at_enqueue_and_a_jobs_own_overrides_it() -> None:
    registry = KindRegistry(builtins=False)
    registry.register(JobKind("capped", lambda p: dict(p), max_attempts=2))
    registry.register(JobKind("plain", lambda p: dict(p)))
    assert validate_job(registry, NewJob("capped")).max_attempts == 2
    assert validate_job(registry, NewJob("capped", max_attempts=7)).max_attempts == 7
    assert validate_job(registry, NewJob("plain")).max_attempts == 5


def test_a_policy_out_of_bounds_is_refused_at_registration_naming_kind_and_field() -> None:
    registry = KindRegistry(builtins=False)
    for field, value in (("lease_seconds", 0.5), ("lease_seconds", float("inf")),
                         ("max_attempts", 0), ("max_running", True),
                         ("rate_per_second", 0.0), ("retry_base_seconds", -1.0)):
        with pytest.raises(ValueError, match=f"job kind 'k': {field} must be"):
            registry.register(JobKind("k", lambda p: dict(p), **{field: value}))
    with pytest.raises(ValueError, match="retry_base_seconds must be between 0 and 5"):
        registry.register(JobKind("k", lambda p: dict(p), retry_base_seconds=9.0,
                                  retry_max_seconds=5.0))


def test_the_decorator_takes_the_policies() -> None:
    registry = KindRegistry(builtins=False)

    @registry.kind("x", lease_seconds=5, max_attempts=3, retry_base_seconds=1,
                   retry_max_seconds=4, max_running=2, rate_per_second=14)
    async def x(ctx: object) -> None: ...

    kind = registry.get("x")
    assert (kind.lease_seconds, kind.max_attempts, kind.retry_base_seconds,
            kind.retry_max_seconds, kind.max_running, kind.rate_per_second) == (5, 3, 1, 4, 2, 14)
    assert kind.limited


def test_a_kinds_retry_base_and_cap_replace_the_workers() -> None:
    settings = WorkerSettings(retry_base_seconds=2, retry_max_seconds=600)
    assert all(0.5 <= settings.backoff(1, base=1, cap=4) <= 1 for _ in range(50))
    assert all(2 <= settings.backoff(30, base=1, cap=4) <= 4 for _ in range(50))
    assert all(300 <= settings.backoff(30) <= 600 for _ in range(50))
