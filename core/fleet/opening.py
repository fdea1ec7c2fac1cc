"""Opening a fleet for the dashboard: the database (embedded or attached), the schema, the
connection budget, the stand-ins, the kinds, the embedded workers, and the training scenario.

Everything that can fail because of the environment fails here, before a screen opens,
as a `TaskboardError` with one line to print.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from taskboard.core import sql
from taskboard.core.base.errors import ConfigError
from taskboard.core.engine.registration import free_connection_slots
from taskboard.core.fleet.drain_report import DrainReport
from taskboard.core.fleet.fleet import Fleet
from taskboard.core.fleet.options import FleetOptions
from taskboard.core.fleet.rooms import drop_room_database, open_room_database
from taskboard.core.kinds import KindRegistry
from taskboard.core.kinds.app_loading import app_spec, load_registry
from taskboard.core.runtime.db import (
    Database,
    connection,
    demo_database,
    ensure_schema,
    open_database,
)
from taskboard.core.runtime.metrics import Metrics, MetricsServer, serve_metrics
from taskboard.core.standins.runtime import Runtime, local_runtime
from taskboard.core.training.kinds import ALL
from taskboard.core.training.scenario import DemoScript, StoryCue, demo_registry
from taskboard.core.view.control import Scenario

log = logging.getLogger("taskboard.fleet")


@dataclass
class OpenFleet:
    """A started fleet, where its database is, and the scenario in demo mode."""

    fleet: Fleet
    database: Database
    scenario: Scenario | None
    metrics_url: str | None = None
    server_url: str = ""
    """The server's own database (not the demo's): where a training room's databases are."""

    @property
    def embedded_data_dir(self) -> str | None:
        """Where the embedded server keeps its data, if one was started."""
        embedded = self.database.embedded
        return str(embedded.data_dir) if embedded is not None else None


@asynccontextmanager
async def open_fleet(
    options: FleetOptions,
    *,
    on_database: object = None,
    before_start: Callable[[], None] | None = None,
    on_drain: Callable[[DrainReport], None] | None = None,
) -> AsyncIterator[OpenFleet]:
    """Start everything the dashboard shows; drain and stop it all on exit.

    `before_start` runs once the database is ready and checked, before any stand-in or
    worker starts: a last check of the caller's own (a `TaskboardError` there stops the
    opening with nothing to drain). `on_drain` hears the embedded workers' drain on exit
    (`Fleet.close`)."""
    # The app first: a bad --app is refused before a server starts.
    if options.demo and options.app is not None:
        raise ConfigError("--demo runs the training scenario's own kinds; drop --app")
    # Imported on the loop's thread, as the app's own code would expect to be.
    registry = None if options.demo else load_registry(app_spec(options.app))
    server = await asyncio.to_thread(open_database)
    try:
        if callable(on_database):
            on_database(server)
        async with _story_database(server, options) as db:
            await _check_budget(db, options)
            if before_start is not None:
                before_start()
            async with local_runtime(os.environ, database_url=db.url) as runtime:
                async with _started(db, runtime, registry, options, on_drain) as opened:
                    yield dataclasses.replace(opened, server_url=server.url)
    finally:
        await asyncio.to_thread(server.close)


@asynccontextmanager
async def _story_database(server: Database, options: FleetOptions) -> AsyncIterator[Database]:
    """The database the fleet runs on: the server's own, the shared demo database (emptied:
    a new demo starts from an empty story), or a browser session's own (dropped on exit)."""
    if not options.demo:
        await ensure_schema(server.url)
        yield server
        return
    if options.room is None:
        db = await demo_database(server)
        await ensure_schema(db.url)
        async with connection(db.url) as conn:
            await conn.execute(sql.DEMO_RESET)
        yield db
        return
    db = await open_room_database(server, options.room)
    try:
        await ensure_schema(db.url)
        yield db
    finally:
        try:
            await drop_room_database(server.url, options.room)
        except Exception:
            log.exception("the demo session's database could not be dropped")


@asynccontextmanager
async def _started(
    db: Database,
    runtime: Runtime,
    registry: KindRegistry | None,
    options: FleetOptions,
    on_drain: Callable[[DrainReport], None] | None,
) -> AsyncIterator[OpenFleet]:
    lease = options.settings.lease_seconds
    cue = StoryCue()
    fleet = Fleet(
        db,
        runtime,
        registry if registry is not None else demo_registry(cue),
        settings=options.settings,
        mode="demo" if options.demo else db.mode,
        name_prefix="worker" if options.demo else None,
        sample_sleep_seconds=lease / 2 if options.demo else None,
    )
    metrics = _serve_metrics(fleet, options)
    try:
        await fleet.start(options.workers)
        await fleet.refresh()  # fail before the UI opens if the board cannot be read
        yield OpenFleet(fleet, db, DemoScript(cue=cue) if options.demo else None,
                        metrics.url if metrics else None)
    finally:
        cue.let_go(ALL)  # held demo handlers finish, so the workers drain in time
        await fleet.close(on_drain)
        if metrics is not None:
            await asyncio.to_thread(metrics.close)


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
