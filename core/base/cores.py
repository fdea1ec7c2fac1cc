"""How many cores this process may use: its affinity mask, capped by a container's CPU limit.

A container limited to one core (a Kubernetes `limits.cpu: 1`, `docker run --cpus 1`) still
sees every core of its host in its affinity mask; only its cgroup says how much CPU time it
may use. The engine decides from this whether a second engine connection pays (on one core
it costs ~5%, bench/results-overlap.md).
"""

from __future__ import annotations

import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def usable_cores(cgroup_root: Path = CGROUP_ROOT) -> int:
    """The affinity mask's cores (else the machine's), at most the whole cores the cgroup's
    CPU limit allows, and at least one."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    limit = cpu_limit(cgroup_root)
    if limit is not None:
        cores = min(cores, int(limit))
    return max(1, cores)


def cpu_limit(cgroup_root: Path = CGROUP_ROOT) -> float | None:
    """Cores' worth of CPU time the cgroup allows (cgroup v2 `cpu.max`, else v1's CFS quota
    over its period); None without a limit or a cgroup file to read."""
    try:
        quota, period = (cgroup_root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        pass
    try:
        quota_us = int((cgroup_root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((cgroup_root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None
