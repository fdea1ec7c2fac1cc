"""Opening a fleet for the dashboard: the database (embedded or attached), the schema, the
connection budget, the stand-ins, the kinds, the embedded workers, and the training scenario.

Everything that can fail because of the environment fails here, before a screen opens,
as a `TaskboardError` with one line to print.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from taskboard.core.app_loading import app_spec, load_registry
from taskboard.core.control import Scenario
from taskboard.core.db import (
    Database,
    connection,
    demo_database,
    ensure_schema,
    open_database,
)
from taskboard.core.engine.registration import free_connection_slots
from taskboard.core.engine.settings import WorkerSettings
from taskboard.core.errors import ConfigError
from taskboard.core.fleet.fleet import Fleet
from taskboard.core.metrics import DEFAULT_HOST, Metrics, MetricsServer, serve_metrics
from taskboard.core.standins.runtime import local_runtime
from taskboard.core.training.scenario import DemoScript, demo_registry


@dataclass(frozen=True)
class FleetOptions:
    """What `taskboard-tui`'s flags ask for."""

    workers: int
    settings: WorkerSettings
    demo: bool = False
    metrics_port: int | None = None  # serve Prometheus metrics of the embedded workers
    metrics_host: str = DEFAULT_HOST
    app: str | None = None  # --app MODULE:ATTR: the application's kinds (else TASKBOARD_APP)


@dataclass
class OpenFleet:
    """A started fleet, where its database is, and the scenario in demo mode."""

    fleet: Fleet
    database: Database
    scenario: Scenario | None
    metrics_url: str | None = None

    @property
    def embedded_data_dir(self) -> str | None:
        """Where the embedded server keeps its data, if one was started."""
        embedded = self.database.embedded
        return str(embedded.data_dir) if embedded is not None else None


@asynccontextmanager
async def open_fleet(
    options: FleetOptions, *, on_database: object = None
) -> AsyncIterator[OpenFleet]:
    """Start everything the dashboard shows; drain and stop it all on exit."""
    # The app first: a bad --app is refused before a server starts.
    if options.demo and options.app is not None:
        raise ConfigError("--demo runs the training scenario's own kinds; drop --app")
    # Imported on the loop's thread, as the app's own code would expect to be.
    registry = None if options.demo else load_registry(app_spec(options.app))
    server = await asyncio.to_thread(open_database)
    try:
        if callable(on_database):
            on_database(server)
        db = await demo_database(server) if options.demo else server
        await ensure_schema(db.url)
        await _check_budget(db, options)
        async with local_runtime(os.environ, database_url=db.url) as runtime:
            lease = options.settings.lease_seconds
            fleet = Fleet(
                db,
                runtime,
                registry if registry is not None else demo_registry(lease),
                settings=options.settings,
                mode="demo" if options.demo else db.mode,
                name_prefix="worker" if options.demo else None,
                sample_sleep_seconds=lease / 2 if options.demo else None,
            )
            metrics = _serve_metrics(fleet, options)
            try:
                await fleet.start(options.workers)
                await fleet.refresh()  # fail before the UI opens if the board cannot be read
                yield OpenFleet(fleet, db, DemoScript() if options.demo else None,
                                metrics.url if metrics else None)
            finally:
                await fleet.close()
                if metrics is not None:
                    await asyncio.to_thread(metrics.close)
    finally:
        await asyncio.to_thread(server.close)


def _serve_metrics(fleet: Fleet, options: FleetOptions) -> MetricsServer | None:
    """The same series as `taskboard worker --metrics-port`, for the embedded workers
    (subscribed before any of them starts, so every claim is counted)."""
    if options.metrics_port is None:
        return None
    metrics = Metrics(fleet.db.url)
    fleet.bus.subscribe(metrics)
    return serve_metrics(metrics, options.metrics_port, options.metrics_host)


async def _check_budget(db: Database, options: FleetOptions) -> None:
    """Refuse, before any worker opens its pool, a fleet the server has no room for: each
    embedded worker's pool and the board's own connection."""
    if options.workers == 0:
        return
    pool = options.settings.pool_size
    needed = options.workers * pool + 1
    async with connection(db.url) as conn:
        free, total = await free_connection_slots(conn)
    if needed > free:
        raise ConfigError(
            f"{options.workers} workers with --pool-size {pool} need {needed} connections; "
            f"the server has {free} free (max_connections {total}): lower --workers or "
            "--pool-size, or raise max_connections"
        )
