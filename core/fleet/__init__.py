"""The dashboard's way into core: the fleet (embedded workers plus the database), how to
open one, and the few settings, argument types and errors the dashboard's flags need.

The dashboard imports `taskboard.core` only through this package, `board` (what it shows)
and `control` (what it may ask); import-linter holds it to that.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from taskboard.core.base.errors import ConfigError, TaskboardError
from taskboard.core.base.libpq_settings import name_sessions
from taskboard.core.base.secrets import one_line
from taskboard.core.engine.settings import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_POOL_SIZE,
    MAX_RESERVED_CONNECTIONS,
    MIN_RESERVED_CONNECTIONS,
    WorkerSettings,
)
from taskboard.core.fleet.drain_report import DrainReport
from taskboard.core.fleet.options import FleetOptions
from taskboard.core.kinds.app_loading import APP_HELP
from taskboard.core.runtime.arguments import OneLineParser, add_version_flag, integer, number
from taskboard.core.runtime.logs import dashboard_logging
from taskboard.core.runtime.metrics import DEFAULT_HOST as DEFAULT_METRICS_HOST

if TYPE_CHECKING:
    from taskboard.core.fleet.desk import SAMPLE_PAYLOADS
    from taskboard.core.fleet.fleet import Fleet
    from taskboard.core.fleet.opening import OpenFleet, open_fleet
    from taskboard.core.fleet.rooms import drop_room_database, room_budget

# Imported on first use: the fleet brings the workers, the stand-ins and their web servers
# (0.5 s of imports), which `taskboard-tui --help` or a bad flag has no use for.
_ON_FIRST_USE = {
    "SAMPLE_PAYLOADS": "taskboard.core.fleet.desk",
    "Fleet": "taskboard.core.fleet.fleet",
    "OpenFleet": "taskboard.core.fleet.opening",
    "open_fleet": "taskboard.core.fleet.opening",
    "drop_room_database": "taskboard.core.fleet.rooms",
    "room_budget": "taskboard.core.fleet.rooms",
}


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "APP_HELP",
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_METRICS_HOST",
    "DEFAULT_POOL_SIZE",
    "MAX_RESERVED_CONNECTIONS",
    "MIN_RESERVED_CONNECTIONS",
    "SAMPLE_PAYLOADS",
    "ConfigError",
    "DrainReport",
    "Fleet",
    "FleetOptions",
    "OneLineParser",
    "OpenFleet",
    "TaskboardError",
    "WorkerSettings",
    "add_version_flag",
    "dashboard_logging",
    "drop_room_database",
    "integer",
    "name_sessions",
    "number",
    "one_line",
    "open_fleet",
    "room_budget",
]
