"""`taskboard-tui --serve` in a real headless Chromium (Debian's `chromium`; `.ci/run`
installs it): the start page (its title, nothing asked of another host), the board, a key
that pauses a worker, a second tab that watches read-only; three `--serve --demo` tabs at
once, each telling its own story in its own database to the end, a fourth told the room is
full. Screenshots go to the test's tmp dir (with TASKBOARD_WRITE_SCREENSHOTS=1 also over
screenshots/browser.png and screenshots/training-room.png). Fails rather than skips without
the browser: the browser view is a feature."""

from __future__ import annotations

import asyncio
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest
from playwright.sync_api import Browser, Page, WebSocket, sync_playwright
from taskboard.core.fleet import ConfigError
from taskboard.core.fleet.rooms import room_database_name
from taskboard.tui.main import build_parser, fleet_options, serve_address, served_arguments
from taskboard.tui.serve import (
    exposure_warning,
    is_loopback,
    served_command,
    trainee_addresses,
)

CHROMIUM = os.environ.get("TASKBOARD_CHROMIUM", "/usr/bin/chromium")
SCREENSHOT = Path(__file__).resolve().parents[2] / "screenshots" / "browser.png"
ANSI = re.compile(r"\x1b(\[[0-9;?<>=]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[PX^_][^\x1b]*\x1b\\|.)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(
    predicate: Callable[[], Any], what: str, timeout: float = 15.0, page: Page | None = None
) -> Any:
    """Wait for `predicate()`; with a page, by letting Playwright run (its sync API hands
    events, such as WebSocket frames, over only while one of its calls runs)."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        if page is not None:
            page.wait_for_timeout(50)
        else:
            time.sleep(0.05)
    return value


class Served:
    """A `taskboard-tui --serve` process and what it printed."""

    def __init__(self, url: str, *args: str, log: Path | None = None) -> None:
        # Without PYTHONUNBUFFERED, as on an operator's host: what the server prints must
        # reach a pipe when it happens, not at exit.
        env = {**os.environ, "TASKBOARD_DATABASE_URL": url}
        env.pop("PYTHONUNBUFFERED", None)
        if log is not None:  # the sessions' dashboards log there too (same environment)
            env["TASKBOARD_TUI_LOG"] = str(log)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "taskboard.tui.main", "--serve", *args],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._read, args=(stream, lines), daemon=True).start()

    @staticmethod
    def _read(stream: Any, lines: list[str]) -> None:
        for line in stream:
            lines.append(line)

    def printed(self) -> str:
        return "".join(self.out) + "".join(self.err)

    def address(self) -> str:
        def serving() -> str | None:
            assert self.proc.poll() is None, self.printed()
            found = re.search(r"serving the dashboard on (http://\S+)", "".join(self.out))
            return found.group(1) if found else None

        return str(until(serving, "the server's address"))

    def _children(self) -> list[tuple[Path, list[str]]]:
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
                if ppid == self.proc.pid:
                    cmdline = (stat.parent / "cmdline").read_bytes().split(b"\0")[:-1]
                    found.append((stat, [part.decode() for part in cmdline]))
            except (OSError, IndexError, ValueError):
                continue
        return found

    def children(self) -> list[list[str]]:
        """Command lines of the processes this server started (a session's dashboard)."""
        return [cmdline for _, cmdline in self._children()]

    def children_pids(self) -> set[int]:
        return {int(stat.parent.name) for stat, _ in self._children()}

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@contextmanager
def served(url: str, *args: str, log: Path | None = None) -> Iterator[Served]:
    server = Served(url, *args, log=log)
    try:
        yield server
    finally:
        server.stop()


class Screen:
    """What the board's WebSocket sent this page, as text (escape sequences taken out):
    the bytes xterm.js draws on the page's canvas, where the DOM has no text to read."""

    def __init__(self, page: Page) -> None:
        self.chunks: list[str] = []
        self.requests: list[str] = []  # every URL the page asked for
        page.on("websocket", self._attach)
        page.on("request", lambda request: self.requests.append(request.url))

    def _attach(self, ws: WebSocket) -> None:
        ws.on("framereceived", self._frame)

    def _frame(self, payload: str | bytes) -> None:
        if isinstance(payload, bytes):
            self.chunks.append(ANSI.sub("", payload.decode("utf-8", "replace")))

    def text(self) -> str:
        return "".join(self.chunks)

    def since(self, mark: int) -> str:
        return "".join(self.chunks[mark:])


def launch(playwright: Any) -> Browser:
    if not Path(CHROMIUM).exists() and not shutil.which(CHROMIUM):
        pytest.fail(
            f"no Chromium at {CHROMIUM}: apt-get install chromium (.ci/run does), or set "
            "TASKBOARD_CHROMIUM"
        )
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
    browser: Browser = playwright.chromium.launch(
        executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
    )
    return browser


def open_page(browser: Browser) -> tuple[Page, Screen]:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    # Off line for certain: a request anywhere else fails (and `Screen.requests` shows it).
    page.route(re.compile(r"^https?://(?!127\.0\.0\.1[:/])"), lambda route: route.abort())
    return page, Screen(page)


UPGRADE = {
    "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}


def status(port: int, path: str, **headers: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def alive(pids: set[int]) -> set[int]:
    """Which of `pids` still run (a zombie has no command line left)."""
    running = set()
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes():
                running.add(pid)
        except OSError:
            continue
    return running


def workers_states(url: str) -> dict[str, str]:
    with psycopg.connect(url) as c:
        return dict(c.execute("SELECT id, state FROM taskboard_workers").fetchall())


def test_the_board_in_chromium_pauses_a_worker_on_a_key(db_url: str, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "dashboards.log"
    with served(db_url, "--port", str(port), "--lease", "2", "--refresh", "0.3",
                log=log) as server:
        address = server.address()
        assert address == f"http://127.0.0.1:{port}/"
        # Any page the trainer visits may open a socket to 127.0.0.1, or reach it through
        # a name of its own resolving there: neither gets the board.
        assert status(port, "/ws", Host=f"127.0.0.1:{port}", Origin="http://evil.example",
                      **UPGRADE) == 403
        assert status(port, "/", Host=f"evil.example:{port}") == 421
        assert status(port, "/", Host=f"localhost:{port}") == 200
        assert server.children() == []
        with sync_playwright() as playwright:
            browser = launch(playwright)
            try:
                page, screen = open_page(browser)
                page.goto(address + "?delay=1")  # the start page, with its button
                assert page.title() == "Taskboard"
                page.get_by_role("button", name="Start").click()
                # Deadlines sized for a loaded CI machine: a session starts a Python process.
                until(lambda: "Workers · 2/2 running" in screen.text(), "the workers panel",
                      page=page, timeout=30)
                until(lambda: "Claims" in screen.text(), "the claims panel", page=page)
                # The dashboard runs as its own process, started with the user's flags (the
                # database URL stays in the environment, off `ps`).
                [command] = until(server.children, "the session's dashboard process")
                assert command[1:] == ["-m", "taskboard.tui.main", "--lease", "2.0",
                                       "--refresh", "0.3"]
                assert not any("postgresql" in part for part in command)
                states = workers_states(db_url)
                assert sorted(states.values()) == ["running", "running"], states

                mark = len(screen.chunks)
                # Keyboard focus without a click: a click would reach the board and focus
                # the panel under it, and p acts on the focused panel's row only.
                page.locator(".xterm-helper-textarea").focus()
                page.keyboard.press("p")  # the first worker is selected on start
                until(lambda: "Workers · 1/2 running" in screen.since(mark),
                      "the paused worker on the board", page=page)
                assert "paused" in screen.since(mark)
                states = workers_states(db_url)
                assert sorted(states.values()) == ["paused", "running"], states

                # An offline room gets everything: nothing is asked of another host.
                assert screen.requests and all(
                    url.startswith(f"http://127.0.0.1:{port}/") or url.startswith("ws://127.0.0.1")
                    for url in screen.requests
                ), screen.requests
                page.wait_for_timeout(300)  # let xterm.js draw the last frame
                shot = tmp_path / "browser.png"
                page.screenshot(path=str(shot))
                assert shot.stat().st_size > 10_000
                if os.environ.get("TASKBOARD_WRITE_SCREENSHOTS"):
                    shutil.copy(shot, SCREENSHOT)

                # A second tab gets the same board read-only: no workers of its own, and a
                # key that would change anything says why instead.
                first_pid = server.children_pids()
                other, other_screen = open_page(browser)
                other.goto(address)
                until(lambda: "read-only" in other_screen.text(), "the read-only board",
                      page=other, timeout=30)
                until(lambda: "Workers · 1/2 running" in other_screen.text(),
                      "the same workers on the read-only board", page=other)
                watching = server.children_pids() - first_pid
                assert len(watching) == 1
                [watcher] = [c for c in server.children() if "--read-only" in c]
                assert watcher[-1] == "--read-only"
                other.locator(".xterm-helper-textarea").focus()
                mark = len(other_screen.chunks)
                other.keyboard.press("p")
                until(lambda: "This tab is read-only" in other_screen.since(mark),
                      "the greyed key's reason", page=other)
                assert sorted(workers_states(db_url).values()) == ["paused", "running"]
                other.close()
                until(lambda: not alive(watching), "the read-only session's end")

                # A reload is the same tab: its new session starts once the old one ended.
                mark = len(screen.chunks)
                page.reload()
                until(lambda: "Workers · 2/4 running" in screen.since(mark),
                      "the reloaded board, with a fresh pair of workers", page=page, timeout=30)
                second_pid = until(server.children_pids, "the new session's process")
                assert len(second_pid) == 1 and second_pid != first_pid
                assert not alive(first_pid)  # the old dashboard had exited before
                assert sorted(workers_states(db_url).values()) == [
                    "running", "running", "stopped", "stopped"]
            finally:
                browser.close()
        assert server.stop() == 0, server.printed()
        # Ctrl+C ended the live session's dashboard too, waited for it, and it drained its
        # workers.
        assert not alive(second_pid)
        states = workers_states(db_url)
        warnings = [line for line in log.read_text().splitlines() if " INFO " not in line]
        assert sorted(states.values()) == ["stopped"] * 4, (states, server.printed(), warnings)
        assert "Traceback" not in server.printed(), server.printed()


def room_databases(url: str) -> list[str]:
    with psycopg.connect(url) as c:
        rows = c.execute(
            "SELECT datname FROM pg_database WHERE starts_with(datname, 'taskboard_demo_s') "
            "ORDER BY 1"
        ).fetchall()
    return [row[0] for row in rows]


def test_three_demo_tabs_each_tell_their_own_story_to_the_answer(
    db_url: str, tmp_path: Path
) -> None:
    port = free_port()
    before = set(room_databases(db_url))
    # A lease long enough for three stories and their renewals on a loaded 2-core host.
    with served(db_url, "--demo", "--port", str(port), "--lease", "5", "--refresh", "0.5",
                "--sessions", "3", log=tmp_path / "dashboards.log") as server:
        address = server.address()
        with sync_playwright() as playwright:
            browser = launch(playwright)
            try:
                tabs = [open_page(browser) for _ in range(3)]
                for page, _screen in tabs:
                    page.goto(address)
                assert tabs[0][0].title() == "Taskboard · training room"
                for page, screen in tabs:
                    until(lambda s=screen: "Training scenario" in s.text(), "a tab's story",
                          page=page, timeout=40)
                    page.locator(".xterm-helper-textarea").focus()
                rooms = set(room_databases(db_url)) - before
                assert len(rooms) == 3, rooms  # a database each
                commands = server.children()
                assert len({c[c.index("--room") + 1] for c in commands}) == 3, commands
                # A fourth is told the room is full, in plain words.
                page4, _ = open_page(browser)
                page4.goto(address)
                assert "The training room is full" in page4.content()
                page4.close()
                # n on each tab in turn until every story reaches its end; pressing early is
                # harmless (the status says what the step waits for).
                finished: set[int] = set()
                deadline = time.monotonic() + 60
                while len(finished) < 3:
                    if time.monotonic() > deadline:
                        for number, (page, _screen) in enumerate(tabs):
                            page.screenshot(path=str(tmp_path / f"tab{number}.png"))
                        steps = [re.findall(r"step \d/\d", s.text())[-1:] for _, s in tabs]
                        raise AssertionError(f"stories stuck at {steps}: {tmp_path}")
                    for number, (page, screen) in enumerate(tabs):
                        if number in finished:
                            continue
                        if "End of the story" in screen.text():
                            finished.add(number)
                            continue
                        page.keyboard.press("n")
                        page.wait_for_timeout(400)
                page, _screen = tabs[0]
                page.wait_for_timeout(600)  # let xterm.js draw the last frame
                shot = tmp_path / "training-room.png"
                page.screenshot(path=str(shot))
                if os.environ.get("TASKBOARD_WRITE_SCREENSHOTS"):
                    shutil.copy(shot, SCREENSHOT.with_name("training-room.png"))
                for _page, screen in tabs:
                    text = screen.text()
                    # Each story is its own: job ids start at 1 in every tab's database.
                    assert "Enqueued email job #1 and billing job #2" in text
                    assert "B completes: the boundary of the fence" in text
            finally:
                browser.close()
        assert server.stop() == 0, server.printed()
    # Each session's database went with its session.
    assert set(room_databases(db_url)) - before == set()


def test_a_session_whose_dashboard_cannot_start_is_closed(db_url: str) -> None:
    # The page must not wait on a process that is gone: closing the socket makes it say
    # "Session ended" (a raw socket here, no browser needed); the reason is on the terminal.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        metrics_port = str(busy.getsockname()[1])
        with served(db_url, "--port", "0", "--metrics-port", metrics_port) as server:
            address = server.address()

            async def session() -> None:
                async with aiohttp.ClientSession() as http, http.ws_connect(
                    address + "ws?width=80&height=24"
                ) as ws:
                    async for _message in ws:
                        pass

            asyncio.run(asyncio.wait_for(session(), 20))
            until(lambda: "session ended" in server.printed(), "the session's end")
            assert f"metrics: cannot listen on 127.0.0.1:{metrics_port}" in server.printed()
            assert server.stop() == 0


def refused(*args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "taskboard.tui.main", *args],
        env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_a_busy_port_is_one_line(db_url: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = refused("--serve", "--port", str(port), env={"TASKBOARD_DATABASE_URL": db_url})
    assert line == (
        f"taskboard-tui: error: port {port} on 127.0.0.1 is already in use: stop what "
        "listens there or pick another with --port"
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--serve", "--port", "65536"], "--port must be between 0 and 65535, got 65536"),
        (["--serve", "--port", "-1"], "--port must be between 0 and 65535, got -1"),
        (["--serve", "--port", "http"], "not an integer: 'http'"),
        (["--port", "8080"], "--port and --host are for --serve"),
        (["--host", "0.0.0.0"], "--port and --host are for --serve"),
        (["--serve", "--host", " "], "--host must not be empty"),
        (["--serve", "--workers", "1000"], "--workers must be between 0 and 100"),
        (["--serve", "--sessions", "3"], "--sessions is for --serve --demo"),
        (["--sessions", "3", "--demo"], "--sessions is for --serve --demo"),
        (["--serve", "--demo", "--sessions", "0"], "--sessions must be between 1 and 200"),
        (["--serve", "--read-only"], "are for a session's dashboard, not --serve"),
        (["--room", "x1"], "--room is for --demo"),
        (["--demo", "--room", "Bad name"], "a demo session name is 1 to 24 lower-case"),
    ],
)
def test_bad_serving_flags_are_refused(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # In this process, checked the way `main` checks them before serving: a subprocess
    # each would cost seconds; the busy port below shows a `ConfigError` becomes one line.
    parser = build_parser()
    try:
        parsed = parser.parse_args(args)
        serve_address(parsed)
        options = fleet_options(parsed)
        if options.room is not None:
            room_database_name(options.room)
    except SystemExit as exc:
        assert exc.code == 2
        assert needle in capsys.readouterr().err
    except ConfigError as exc:
        assert needle in str(exc)
    else:
        pytest.fail(f"{args} accepted")


def test_an_unreachable_database_is_refused_before_serving() -> None:
    line = refused("--serve", "--port", "0",
                   env={"TASKBOARD_DATABASE_URL": "postgresql://maya:s3cret@127.0.0.1:1/app"})
    assert "cannot connect to postgresql://maya:***@127.0.0.1:1/app" in line
    assert "s3cret" not in line


def test_sessions_get_the_users_flags_minus_the_serving_ones() -> None:
    parser = build_parser()
    args = parser.parse_args(["--ser", "--port=9000", "--host", "::1", "--demo", "--workers=3",
                              "--metrics-host", "a b"])
    assert served_arguments(parser, args) == ["--workers", "3", "--metrics-host", "a b", "--demo"]
    assert served_command(["--metrics-host", "a b"]).endswith(
        "-m taskboard.tui.main --metrics-host 'a b'")
    assert all(is_loopback(h) for h in ("127.0.0.1", "::1", "[::1]", "localhost", "127.8.0.1"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.5", "board.example"))
    assert exposure_warning("127.0.0.1") is None
    assert "anyone who can open this address controls the workers" in str(
        exposure_warning("0.0.0.0"))


def test_a_board_on_every_address_names_the_ones_trainees_can_type() -> None:
    urls = trainee_addresses("0.0.0.0", 8090)
    assert urls and not any("0.0.0.0" in url or "127.0.0.1" in url for url in urls), urls
    assert all(url.startswith("http://") and url.endswith(":8090/") for url in urls)
    assert trainee_addresses("10.1.2.3", 8090) == ["http://10.1.2.3:8090/"]
    assert trainee_addresses("::1", 80) == ["http://[::1]:80/"]
