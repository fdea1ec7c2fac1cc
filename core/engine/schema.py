"""The schema, versioned, applied under an advisory lock so concurrent starts are safe."""

from __future__ import annotations

from psycopg import AsyncConnection
from taskboard.core.errors import SchemaTooNew

# Any constant works as long as every Taskboard process agrees on it; it only serialises
# migrations, so two workers starting at once do not both try to create the tables.
MIGRATION_LOCK_KEY = 0x7A5B_B0A2_D000_0001

MIGRATIONS: tuple[str, ...] = (
    # 1: jobs, attempts history, workers, billing records
    """
    CREATE TABLE taskboard_jobs (
        id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        kind             text        NOT NULL,
        payload          jsonb       NOT NULL DEFAULT '{}'::jsonb,
        queue            text        NOT NULL DEFAULT 'default',
        priority         integer     NOT NULL DEFAULT 0,
        run_at           timestamptz NOT NULL DEFAULT now(),
        attempts         integer     NOT NULL DEFAULT 0,
        max_attempts     integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
        lease_token      uuid,
        lease_expires_at timestamptz,
        claimed_by       text,
        claimed_at       timestamptz,
        completed_at     timestamptz,
        failed_at        timestamptz,
        cancelled_at     timestamptz,
        last_error       text,
        created_at       timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT taskboard_jobs_lease_pair
            CHECK ((lease_token IS NULL) = (lease_expires_at IS NULL))
    );
    -- Claim scan: only unleased, unfinished jobs are in this index, in claim order.
    CREATE INDEX taskboard_jobs_ready ON taskboard_jobs (queue, priority DESC, run_at, id)
        WHERE lease_token IS NULL AND completed_at IS NULL AND failed_at IS NULL
          AND cancelled_at IS NULL;
    -- Reclaim scan and the wake-up timer: only held leases, by deadline.
    CREATE INDEX taskboard_jobs_leased ON taskboard_jobs (lease_expires_at)
        WHERE lease_token IS NOT NULL;
    CREATE INDEX taskboard_jobs_dead ON taskboard_jobs (failed_at DESC) WHERE failed_at IS NOT NULL;

    CREATE TABLE taskboard_attempts (
        id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        job_id            bigint      NOT NULL REFERENCES taskboard_jobs (id) ON DELETE CASCADE,
        attempt           integer     NOT NULL,
        lease_token       uuid        NOT NULL,
        worker_id         text        NOT NULL,
        claimed_at        timestamptz NOT NULL,
        ended_at          timestamptz,
        renewal_failed_at timestamptz,
        outcome           text CHECK (outcome IN
            ('completed', 'completion_rejected', 'lease_lost', 'failed', 'released')),
        error             text,
        UNIQUE (job_id, lease_token)
    );
    CREATE INDEX taskboard_attempts_trouble ON taskboard_attempts (ended_at DESC)
        WHERE outcome IN ('completion_rejected', 'lease_lost') OR renewal_failed_at IS NOT NULL;

    CREATE TABLE taskboard_workers (
        id              text PRIMARY KEY,
        host            text        NOT NULL,
        pid             integer     NOT NULL,
        started_at      timestamptz NOT NULL DEFAULT now(),
        heartbeat_at    timestamptz NOT NULL DEFAULT now(),
        stopped_at      timestamptz,
        state           text        NOT NULL DEFAULT 'running',
        pause_requested boolean     NOT NULL DEFAULT false,
        drain_requested boolean     NOT NULL DEFAULT false,
        queues          text[]      NOT NULL DEFAULT '{default}',
        lease_seconds   double precision NOT NULL,
        capacity        integer     NOT NULL,
        in_flight       integer     NOT NULL DEFAULT 0,
        renewals_ok     bigint      NOT NULL DEFAULT 0,
        renewals_failed bigint      NOT NULL DEFAULT 0,
        pool_max        integer     NOT NULL DEFAULT 0,
        pool_in_use     integer     NOT NULL DEFAULT 0,
        pool_idle       integer     NOT NULL DEFAULT 0,
        pool_waiting    integer     NOT NULL DEFAULT 0
    );

    CREATE TABLE taskboard_billing_charges (
        job_id            bigint PRIMARY KEY REFERENCES taskboard_jobs (id) ON DELETE CASCADE,
        payment_intent_id text        NOT NULL,
        amount            bigint      NOT NULL,
        currency          text        NOT NULL,
        customer          text        NOT NULL,
        recorded_at       timestamptz NOT NULL DEFAULT now()
    );
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)


async def migrate(conn: AsyncConnection[object]) -> int:
    """Apply pending migrations; returns the schema version. Safe to run concurrently.

    Raises `SchemaTooNew` if the database was migrated by a newer Taskboard, so an old
    worker never runs fenced SQL against columns it does not know.
    """
    # Up to date: nothing to do, and no DDL privilege needed (workers may run under a
    # least-privileged role that cannot CREATE anything).
    current = await schema_version(conn)
    if current > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"database schema is version {current}, newer than this Taskboard "
            f"understands ({SCHEMA_VERSION}); upgrade Taskboard"
        )
    if current == SCHEMA_VERSION:
        return current
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS taskboard_schema ("
            " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cur = await conn.execute("SELECT coalesce(max(version), 0) FROM taskboard_schema")
        row = await cur.fetchone()
        current = int(row[0]) if row else 0  # type: ignore[index]
        if current > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"database schema is version {current}, newer than this Taskboard "
                f"understands ({SCHEMA_VERSION}); upgrade Taskboard"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            await conn.execute(MIGRATIONS[version - 1].encode())
            await conn.execute("INSERT INTO taskboard_schema (version) VALUES (%s)", (version,))
    return SCHEMA_VERSION


async def schema_version(conn: AsyncConnection[object]) -> int:
    """The applied schema version, 0 when Taskboard's tables do not exist yet."""
    cur = await conn.execute("SELECT to_regclass('taskboard_schema') IS NOT NULL")
    row = await cur.fetchone()
    if not row or not row[0]:  # type: ignore[index]
        return 0
    cur = await conn.execute("SELECT coalesce(max(version), 0) FROM taskboard_schema")
    row = await cur.fetchone()
    return int(row[0]) if row else 0  # type: ignore[index]
