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
    from taskboard.core.base.errors import (
        ConfigError,
        DatabaseUnavailable,
        LeaseLost,
        NoResult,
        PermanentJobError,
        TaskboardError,
        ValidationError,
    )
    from taskboard.core.engine.settings import WorkerSettings
    from taskboard.core.engine.worker import Worker
    from taskboard.core.kinds import builtin_registry
    from taskboard.core.kinds.registry import (
        EffectTicket,
        JobContext,
        JobKind,
        JsonObject,
        KindRegistry,
    )
    from taskboard.core.kinds.sync_context import SyncJobContext
    from taskboard.core.queue.enqueueing import enqueue, enqueue_many
    from taskboard.core.queue.jobs import NewJob
    from taskboard.core.queue.results import result
    from taskboard.core.runtime.db import Database, ensure_schema, open_database
    from taskboard.core.runtime.testing import JobOutcome, run_jobs, run_jobs_sync

_WHERE = {
    "Database": "taskboard.core.runtime.db",
    "ensure_schema": "taskboard.core.runtime.db",
    "open_database": "taskboard.core.runtime.db",
    "WorkerSettings": "taskboard.core.engine.settings",
    "Worker": "taskboard.core.engine.worker",
    "enqueue": "taskboard.core.queue.enqueueing",
    "enqueue_many": "taskboard.core.queue.enqueueing",
    "ConfigError": "taskboard.core.base.errors",
    "DatabaseUnavailable": "taskboard.core.base.errors",
    "LeaseLost": "taskboard.core.base.errors",
    "NoResult": "taskboard.core.base.errors",
    "PermanentJobError": "taskboard.core.base.errors",
    "TaskboardError": "taskboard.core.base.errors",
    "ValidationError": "taskboard.core.base.errors",
    "NewJob": "taskboard.core.queue.jobs",
    "builtin_registry": "taskboard.core.kinds",
    "EffectTicket": "taskboard.core.kinds.registry",
    "JobContext": "taskboard.core.kinds.registry",
    "JobKind": "taskboard.core.kinds.registry",
    "JsonObject": "taskboard.core.kinds.registry",
    "KindRegistry": "taskboard.core.kinds.registry",
    "SyncJobContext": "taskboard.core.kinds.sync_context",
    "result": "taskboard.core.queue.results",
    "JobOutcome": "taskboard.core.runtime.testing",
    "run_jobs": "taskboard.core.runtime.testing",
    "run_jobs_sync": "taskboard.core.runtime.testing",
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
