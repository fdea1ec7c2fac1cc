"""`taskboard-tui --app MODULE:ATTR`: the dashboard's embedded workers run the app's kinds,
and its enqueue key offers them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from taskboard.core import NewJob, enqueue_many
from taskboard.core.fleet import open_fleet
from taskboard.tui.app import TaskboardApp
from taskboard.tui.main import build_parser, fleet_options, main
from taskboard.tui.screens.prompt import PromptScreen
from textual.message import Message
from textual.notifications import Notify
from textual.pilot import Pilot
from textual.widgets import Input, Static

from tests.apps.shapes import registry as shapes

ROOT = Path(__file__).resolve().parents[2]  # where `tests.apps` is found, as users' apps are


@asynccontextmanager
async def shapes_dashboard(
    db_url: str, log: Path, monkeypatch: pytest.MonkeyPatch,
    hook: Callable[[Message], None] | None = None,
) -> AsyncIterator[Pilot[None]]:
    """`taskboard-tui --app tests.apps.shapes:registry --workers 1` over `db_url`, headless;
    the app's handlers write a line per run to `log`."""
    monkeypatch.setenv("TASKBOARD_DATABASE_URL", db_url)
    monkeypatch.setenv("SHAPES_LOG", str(log))
    monkeypatch.chdir(ROOT)
    args = build_parser().parse_args(
        ["--app", "tests.apps.shapes:registry", "--workers", "1", "--lease", "5"])
    async with open_fleet(fleet_options(args)) as opened:
        app = TaskboardApp(opened.fleet, refresh_seconds=0.2, mode_label="test")
        async with app.run_test(size=(140, 45), message_hook=hook) as pilot:
            yield pilot


async def test_the_dashboards_embedded_worker_runs_the_apps_kinds(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "shapes.log"
    async with shapes_dashboard(db_url, log, monkeypatch) as pilot:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            ids = await enqueue_many(conn, shapes, [NewJob("square", {"side": 5}),
                                                    NewJob("cube", {"side": 3})])
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while not await _completed(conn, ids):
                assert loop.time() < deadline, "the app's jobs did not complete"
                await pilot.pause(0.1)
    assert sorted(log.read_text().splitlines()) == [
        f"cube {ids[1]} 27", f"square {ids[0]} square 25"]


async def _completed(conn: psycopg.AsyncConnection[Any], ids: list[int]) -> bool:
    cur = await conn.execute(
        "SELECT count(*) FROM taskboard_jobs WHERE id = ANY(%s) AND completed_at IS NOT NULL",
        (ids,))
    row = await cur.fetchone()
    return row is not None and row[0] == len(ids)


def test_a_bad_app_stops_the_dashboard_before_it_starts_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKBOARD_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.chdir(ROOT)
    assert main(["--app", "tests.apps.shapes:not_a_registry"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a KindRegistry" in err[0], err
    assert main(["--demo", "--app", "tests.apps.shapes:registry"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "drop --app" in err[0], err


async def test_the_enqueue_key_offers_the_apps_kinds_and_its_embedded_worker_runs_one(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "shapes.log"
    said: list[str] = []

    def hook(message: Message) -> None:
        if isinstance(message, Notify):
            said.append(message.notification.message)

    async with shapes_dashboard(db_url, log, monkeypatch, hook) as pilot:
        await pilot.press("E")
        kind = await _prompt(pilot)
        question = str(kind.query_one("#prompt-question", Static).render())
        assert "The app's: cube, square." in question, question
        assert "Built-in: billing, email, noop, sleep." in question, question
        kind.query_one(Input).value = "square"
        await pilot.press("enter")
        payload = await _prompt(pilot, not_this=kind)
        assert "side: is required" in str(
            payload.query_one("#prompt-question", Static).render())
        await pilot.press("enter")  # the empty payload: the kind's validation refuses it
        await pilot.pause()
        assert "side: is required" in str(payload.query_one("#prompt-error", Static).render())
        payload.query_one(Input).value = '{"side": 4, "label": "from the keys"}'
        await pilot.press("enter")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while not (log.exists() and log.read_text()):
            assert loop.time() < deadline, f"the square job did not run; said {said}"
            await pilot.pause(0.1)
    [line] = log.read_text().splitlines()
    enqueued = [m for m in said if m.startswith("Enqueued square job #")]
    assert enqueued, said
    job_id = enqueued[0].removeprefix("Enqueued square job #")
    assert line == f"square {job_id} from the keys 16"


async def _prompt(pilot: Pilot[None], not_this: PromptScreen | None = None) -> PromptScreen:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while not (isinstance(screen := pilot.app.screen, PromptScreen) and screen is not not_this):
        assert loop.time() < deadline, "no question asked"
        await pilot.pause(0.05)
    return screen
