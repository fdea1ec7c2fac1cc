"""Typed kinds (validation derived from a dataclass), enqueue from synchronous code in the
application's own transaction, and the `run_jobs` helper for applications' test suites."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Literal

import psycopg
import pytest
from taskboard.core import (
    JobContext,
    KindRegistry,
    NewJob,
    PermanentJobError,
    SyncJobContext,
    ValidationError,
    enqueue,
    enqueue_many,
    run_jobs,
)


@dataclass
class Size:
    width: int
    height: int = 64


@dataclass
class Thumbnail:
    url: str
    size: Size
    format: Literal["png", "webp"] = "png"
    quality: float = 0.8
    tags: list[str] = field(default_factory=list)
    caption: str | None = None
    crop: bool = False


def thumbnails(seen: list[Thumbnail] | None = None) -> KindRegistry:
    registry = KindRegistry()

    @registry.kind("thumbnail")
    async def thumbnail(ctx: JobContext, job: Thumbnail) -> None:
        if seen is not None:
            seen.append(job)

    return registry


def test_a_typed_payload_is_validated_from_its_dataclass_and_defaults_are_stored() -> None:
    registry = thumbnails()
    stored = registry.validate("thumbnail", {"url": "https://x/a.png", "size": {"width": 32},
                                             "quality": 1})
    assert stored == {"url": "https://x/a.png", "size": {"width": 32, "height": 64},
                      "format": "png", "quality": 1.0, "tags": [], "caption": None,
                      "crop": False}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"size": {"width": 1}}, "url: is required"),
        ({"url": 3, "size": {"width": 1}}, "url: must be a string, got integer"),
        ({"url": "u", "size": {"width": "1"}}, "size.width: must be an integer, got string"),
        ({"url": "u", "size": {"width": True}}, "size.width: must be an integer, got boolean"),
        ({"url": "u", "size": {"width": 1, "depth": 2}}, "size.depth: is not a field"),
        ({"url": "u", "size": 5}, "size: must be an object, got integer"),
        ({"url": "u", "size": {"width": 1}, "format": "gif"}, "format: must be one of"),
        ({"url": "u", "size": {"width": 1}, "tags": ["a", 2]}, "tags[1]: must be a string"),
        ({"url": "u", "size": {"width": 1}, "caption": 7}, "caption: must be a string"),
        ({"url": "u", "size": {"width": 1}, "crop": 1}, "crop: must be true or false"),
        ({"url": "u", "size": {"width": 1}, "colour": "red"}, "colour: is not a field"),
    ],
)
def test_a_bad_typed_payload_is_refused_naming_the_field(
    payload: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        thumbnails().validate("thumbnail", payload)


def test_a_payload_type_the_derivation_cannot_check_is_refused_when_declared() -> None:
    @dataclass
    class Odd:
        when: set[int]

    registry = KindRegistry()
    with pytest.raises(TypeError, match=r"Odd\.when: type"):
        registry.kind("odd", payload=Odd)(lambda ctx, job: None)
    with pytest.raises(TypeError, match="annotate its payload parameter"):
        registry.kind("odd")(lambda ctx, job: None)
    assert registry.names() == []


def test_the_hand_written_validator_stays_possible_beside_typed_kinds() -> None:
    from taskboard.core import JobKind

    registry = thumbnails()
    registry.register(JobKind("upper", lambda p: {"text": str(p.get("text", "")).upper()}))
    assert registry.validate("upper", {"text": "hi"}) == {"text": "HI"}


def test_sync_enqueue_in_the_applications_transaction_notifies_only_on_commit(
    db_url: str,
) -> None:
    registry = thumbnails()
    payload = {"url": "https://x/a.png", "size": {"width": 8}}
    with psycopg.connect(db_url, autocommit=True) as listener, psycopg.connect(db_url) as app:
        listener.execute("LISTEN taskboard_jobs")
        # A rolled-back request: no job, no wake-up.
        with app.transaction():
            [gone] = enqueue_many(app, registry, [NewJob("thumbnail", payload)])
            assert isinstance(gone, int)
            raise psycopg.Rollback()
        assert list(listener.notifies(timeout=0.3)) == []
        assert listener.execute("SELECT count(*) FROM taskboard_jobs").fetchone() == (0,)
        with app.transaction():
            job = enqueue(app, registry, "thumbnail", payload, queue="images")
            keyed = enqueue(app, registry, "thumbnail", payload, unique_key="k")
            again = enqueue(app, registry, "thumbnail", payload, unique_key="k")
            assert keyed == again
            # Not visible to anyone, nobody woken, before the commit.
            assert list(listener.notifies(timeout=0.3)) == []
            other = listener.execute("SELECT count(*) FROM taskboard_jobs").fetchone()
            assert other == (0,)
        heard = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
        assert heard and heard[0] in ("images", "default")
        rows = listener.execute("SELECT id FROM taskboard_jobs ORDER BY id").fetchall()
        assert [r[0] for r in rows] == [job, keyed]
    with psycopg.connect(db_url) as app, pytest.raises(ValidationError, match="size"):
        enqueue(app, registry, "thumbnail", {"url": "u"})


async def test_run_jobs_runs_a_registrys_jobs_to_completion_and_returns_the_outcomes(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    seen: list[Thumbnail] = []
    registry = thumbnails(seen)
    threads: list[str] = []

    @registry.kind("refuse")
    def refuse(ctx: SyncJobContext) -> None:
        threads.append(threading.current_thread().name)
        raise PermanentJobError("no such image")

    ids = await enqueue_many(conn, registry, [
        NewJob("thumbnail", {"url": "https://x/a.png", "size": {"width": 8}}),
        NewJob("refuse"),
    ])
    outcomes = await run_jobs(db_url, registry, timeout=30)
    assert [(o.id, o.kind, o.state, o.attempts) for o in outcomes] == [
        (ids[0], "thumbnail", "completed", 1), (ids[1], "refuse", "dead", 1)]
    assert outcomes[1].last_error is not None and "no such image" in outcomes[1].last_error
    assert seen == [Thumbnail("https://x/a.png", Size(8))]
    assert threads and threads[0].startswith("taskboard-sync")
