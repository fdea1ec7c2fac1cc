"""Fixtures of the failover tests: a fresh primary and standby per test, copied from one
initialised, migrated data folder made once per session."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ha.cluster import Cluster, initialised_template


@pytest.fixture(scope="session")
def ha_template() -> Iterator[Path]:
    """An initialised data folder with the schema migrated (stopped)."""
    root = Path(tempfile.mkdtemp(prefix="taskboard-ha-template-"))
    try:
        yield initialised_template(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def cluster(ha_template: Path) -> Iterator[Cluster]:
    """A primary streaming to a standby, both on loopback; removed after the test."""
    made = Cluster.create(ha_template, extra_params="connect_timeout=2")
    try:
        yield made
    finally:
        made.close()
