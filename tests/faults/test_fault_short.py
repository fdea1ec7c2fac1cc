"""A short fault run in the default suite: stalls, kills, cut connections, a database
restart, SMTP and Stripe failures, oversized rows, a time zone change (and silent drops once
tests/drop_proxy.py exists), while an operator prunes, retries, cancels, pauses the queue,
times billing jobs out and keeps a schedule firing; the checker must find nothing lost or
doubled, and no effect without its record.

The seed is printed; replay a failing run with `TASKBOARD_FAULT_SEED=<seed>`.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from tests.faults.conftest import RestartableDb
from tests.faults.harness import SHORT_FAULTS, FaultConfig, run_faults
from tests.faults.operators import SHORT_WEIGHTS, OperatorConfig
from tests.faults.server import freeze_server, local_data_dir


def _seed() -> int:
    configured = os.environ.get("TASKBOARD_FAULT_SEED")
    return int(configured) if configured else random.SystemRandom().randrange(1, 2**31)


async def test_short_fault_run_loses_nothing(fault_db: RestartableDb, tmp_path: Path) -> None:
    url, restart = fault_db
    data_dir = local_data_dir(url)
    assert data_dir is not None, "the fault run needs a server on this machine to freeze"
    config = FaultConfig(seed=_seed(), workers=3, jobs=1500, lease=1.0,
                         operator=OperatorConfig(weights=SHORT_WEIGHTS, gap=1.0))
    report = await run_faults(
        url, config, tmp_path, restart=restart,
        freeze=lambda seconds: freeze_server(data_dir, seconds),
    )
    print(report.summary_line())
    assert report.ok, report.details()
    # Every fault of the plan was applied, and it really cost leases.
    assert dict(report.faults) == dict(SHORT_FAULTS), report.details()
    assert report.pending == 0, report.details()
    assert report.lost_leases > 0, report.details()
    # Nearly everything completed; the dead are the declined cards, 550s and bad rows.
    assert report.jobs >= 1500 and report.completed >= 0.9 * report.jobs, report.details()
    assert report.emails > 0 and report.charges > 0, report.details()
    # The operator acted, and its prunes deleted finished jobs the checker still judged.
    assert sum(report.operations[a] for a in ("prune", "retry", "cancel")) > 0, report.details()
    assert report.operations["schedule"] > 0, report.details()
    # The every-second schedule fired (its slots were judged, not skipped as never run).
    often = [n for n in report.notes if n.startswith("schedule fault-often")]
    assert often and "never fired" not in often[0], report.details()
