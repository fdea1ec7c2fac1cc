"""A short fault run against a primary and a synchronous standby, failing over twice (a
kill, then a freeze or a read-only primary) with worker kills, cut connections and SMTP and
Stripe trouble around it: with synchronous replication a failover loses nothing
acknowledged, so the checker must find nothing lost or doubled and nothing replication
lost. The seed is printed; replay with `TASKBOARD_FAULT_SEED=<seed>`."""

from __future__ import annotations

import os
import random
from pathlib import Path

from tests.faults.failover import Replication
from tests.faults.harness import FaultConfig, run_faults
from tests.ha.cluster import Cluster

FAULTS = {"failover": 2, "kill": 1, "cut": 1, "smtp": 1, "stripe": 2}


def _seed() -> int:
    configured = os.environ.get("TASKBOARD_FAULT_SEED")
    return int(configured) if configured else random.SystemRandom().randrange(1, 2**31)


async def test_failovers_with_synchronous_replication_lose_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    config = FaultConfig(seed=_seed(), workers=2, jobs=300, lease=2.0, fault_counts=FAULTS,
                         malformed=False, settle_timeout=40.0, recovery_timeout=20.0)
    replication = Replication(cluster, synchronous=True)
    report = await run_faults(cluster.url, config, tmp_path, replication=replication)
    print(report.summary_line())
    assert report.ok, report.details()
    assert dict(report.faults) == FAULTS, report.details()
    assert report.lost_enqueues == 0 and report.lost_completions == 0, report.details()
    assert "replication lost: 0 enqueues, 0 completions; queue violations: 0" in (
        report.summary_line()
    )
    assert report.pending == 0 and report.completed >= 0.9 * report.jobs, report.details()
    # Both failovers happened with work in flight, and the fleet came back after each.
    failovers = [n for n in report.notes if " failover/" in n]
    assert len(failovers) == 2, report.details()
    assert report.recovery is not None, report.details()
