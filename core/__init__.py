"""Taskboard's public API: everything an application needs, from one import.

    from taskboard.core import KindRegistry, JobContext, NewJob, enqueue, ensure_schema

Everything else under `taskboard.core` is internal and may move between releases. The
names are loaded on first use (PEP 562), so `import taskboard.core.<module>` stays cheap
for the command line, which does not start the engine for most commands. Never imports
Textual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from taskboard.core.db import Database, ensure_schema, open_database
    from taskboard.core.engine.settings import WorkerSettings
    from taskboard.core.engine.worker import Worker
    from taskboard.core.enqueueing import enqueue, enqueue_many
    from taskboard.core.errors import (
        ConfigError,
        DatabaseUnavailable,
        LeaseLost,
        NoResult,
        PermanentJobError,
        TaskboardError,
        ValidationError,
    )
    from taskboard.core.jobs import NewJob
    from taskboard.core.kinds import builtin_registry
    from taskboard.core.kinds.registry import (
        EffectTicket,
        JobContext,
        JobKind,
        JsonObject,
        KindRegistry,
    )
    from taskboard.core.kinds.sync_context import SyncJobContext
    from taskboard.core.results import result
    from taskboard.core.testing import JobOutcome, run_jobs, run_jobs_sync

_WHERE = {
    "Database": "taskboard.core.db",
    "ensure_schema": "taskboard.core.db",
    "open_database": "taskboard.core.db",
    "WorkerSettings": "taskboard.core.engine.settings",
    "Worker": "taskboard.core.engine.worker",
    "enqueue": "taskboard.core.enqueueing",
    "enqueue_many": "taskboard.core.enqueueing",
    "ConfigError": "taskboard.core.errors",
    "DatabaseUnavailable": "taskboard.core.errors",
    "LeaseLost": "taskboard.core.errors",
    "NoResult": "taskboard.core.errors",
    "PermanentJobError": "taskboard.core.errors",
    "TaskboardError": "taskboard.core.errors",
    "ValidationError": "taskboard.core.errors",
    "NewJob": "taskboard.core.jobs",
    "builtin_registry": "taskboard.core.kinds",
    "EffectTicket": "taskboard.core.kinds.registry",
    "JobContext": "taskboard.core.kinds.registry",
    "JobKind": "taskboard.core.kinds.registry",
    "JsonObject": "taskboard.core.kinds.registry",
    "KindRegistry": "taskboard.core.kinds.registry",
    "SyncJobContext": "taskboard.core.kinds.sync_context",
    "result": "taskboard.core.results",
    "JobOutcome": "taskboard.core.testing",
    "run_jobs": "taskboard.core.testing",
    "run_jobs_sync": "taskboard.core.testing",
}

__all__ = [
    "ConfigError",
    "Database",
    "DatabaseUnavailable",
    "EffectTicket",
    "JobContext",
    "JobKind",
    "JobOutcome",
    "JsonObject",
    "KindRegistry",
    "LeaseLost",
    "NewJob",
    "NoResult",
    "PermanentJobError",
    "SyncJobContext",
    "TaskboardError",
    "ValidationError",
    "Worker",
    "WorkerSettings",
    "builtin_registry",
    "enqueue",
    "enqueue_many",
    "ensure_schema",
    "open_database",
    "result",
    "run_jobs",
    "run_jobs_sync",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'taskboard.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # found once
    return value


def __dir__() -> list[str]:
    return __all__
