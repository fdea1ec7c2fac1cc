"""A container's CPU limit caps the cores the engine counts (a second engine connection
costs ~5% on one core): cgroup v2's `cpu.max`, else v1's CFS quota over its period."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from taskboard.core.base.cores import cpu_limit, usable_cores


def _v2(root: Path, text: str) -> Path:
    (root / "cpu.max").write_text(text)
    return root


def _v1(root: Path, quota: str, period: str) -> Path:
    (root / "cpu").mkdir()
    (root / "cpu" / "cpu.cfs_quota_us").write_text(quota)
    (root / "cpu" / "cpu.cfs_period_us").write_text(period)
    return root


@pytest.mark.parametrize(
    ("text", "cores"),
    [("max 100000\n", None), ("100000 100000\n", 1.0), ("150000 100000\n", 1.5),
     ("400000 100000\n", 4.0), ("garbage\n", None), ("50000 0\n", None)],
)
def test_cgroup_v2_cpu_max(tmp_path: Path, text: str, cores: float | None) -> None:
    assert cpu_limit(_v2(tmp_path, text)) == cores


@pytest.mark.parametrize(
    ("quota", "period", "cores"),
    [("-1\n", "100000\n", None), ("100000\n", "100000\n", 1.0), ("250000", "100000", 2.5),
     ("x", "100000", None)],
)
def test_cgroup_v1_cfs_quota(tmp_path: Path, quota: str, period: str,
                             cores: float | None) -> None:
    assert cpu_limit(_v1(tmp_path, quota, period)) == cores


def test_no_cgroup_files_means_no_limit(tmp_path: Path) -> None:
    assert cpu_limit(tmp_path) is None
    assert usable_cores(tmp_path) == len(os.sched_getaffinity(0))


def test_a_one_and_a_half_core_limit_counts_one_core_and_no_limit_counts_them_all(
    tmp_path: Path,
) -> None:
    assert usable_cores(_v2(tmp_path, "150000 100000")) == 1
    assert usable_cores(_v2(tmp_path, "max 100000")) == len(os.sched_getaffinity(0))
    assert usable_cores(_v2(tmp_path, "1000 100000")) == 1  # a hundredth of a core: still one
