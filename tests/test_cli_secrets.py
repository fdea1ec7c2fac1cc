"""No password in anything the commands print, whatever libpq says about the URL.

libpq quotes the parts of a connection string it cannot parse: `invalid percent-encoded
token: "s3cr3t%PW"` for a URL whose password holds a bare `%`, `missing "=" after "PW"` for
`password=s3cr3t PW` written without quotes. A password typed into a URL without
percent-encoding (`maya:s3cr3t/PW@host`, `maya:s3cr3t@PW@host`) makes libpq read pieces of
it as a port or a host and quote those back. Every command, the worker and the dashboard
are run for real here, and their whole output searched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from taskboard.core.base import secrets

# Every piece of the password; "PW" alone is what leaked from the key=value form.
PIECES = ("s3cr3t%PW", "s3cr3t PW", "s3cr3t", "PW")

URLS = {
    "URL, bare %": "postgres://maya:s3cr3t%PW@127.0.0.1:1/app",
    "key=value, unquoted space": "host=127.0.0.1 port=1 password=s3cr3t PW dbname=app",
    "URL query, bare %": "postgres://maya@127.0.0.1:1/app?password=s3cr3t%PW",
    "URL, bare /": "postgres://maya:s3cr3t/PW@127.0.0.1:1/app",
    "URL, bare @": "postgres://maya:s3cr3t@PW@127.0.0.1:1/app",
    "key=value, quoted": "host=127.0.0.1 port=1 password='s3cr3t PW' dbname=app",
}

COMMANDS = {
    "status": ["taskboard", "status"],
    "status --json": ["taskboard", "status", "--json"],
    "enqueue": ["taskboard", "enqueue", "noop"],
    "migrate": ["taskboard", "migrate"],
    # A worker waits a lease for a database it cannot reach (exit 5), logging each retry.
    "worker": ["taskboard", "worker", "--id", "w", "--lease", "1"],
    "retry": ["taskboard", "retry", "1"],
    "cancel": ["taskboard", "cancel", "1"],
    "history": ["taskboard", "history", "1"],
    "dashboard": ["taskboard-tui"],
}
MODULES = {"taskboard": "taskboard.core.cli", "taskboard-tui": "taskboard.tui.main"}
UNPARSEABLE = ["URL, bare %", "key=value, unquoted space", "URL query, bare %"]

# One xdist worker runs this module, so the 54 processes of `outputs` start once, not once
# per worker that happened to get one of its tests (`--dist loadgroup` in pyproject).
pytestmark = pytest.mark.xdist_group("cli_secrets")


def _run(url: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "TASKBOARD_TUI_LOG")}
    env["TASKBOARD_DATABASE_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", MODULES[argv[0]], *argv[1:]],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def outputs() -> dict[tuple[str, str], subprocess.CompletedProcess[str]]:
    """Every command against every URL, run at once (each is mostly interpreter start-up)."""
    cases = [(u, c) for u in URLS for c in COMMANDS]
    with ThreadPoolExecutor(max_workers=8) as pool:
        procs = list(pool.map(lambda case: _run(URLS[case[0]], COMMANDS[case[1]]), cases))
    return dict(zip(cases, procs, strict=True))


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("url", list(URLS))
def test_no_piece_of_the_password_is_ever_printed(
    outputs: dict[tuple[str, str], subprocess.CompletedProcess[str]], url: str, command: str
) -> None:
    proc = outputs[url, command]
    everything = proc.stdout + proc.stderr
    for piece in PIECES:
        assert piece not in everything, f"{piece!r} leaked: {everything}"
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""
    *retries, last = proc.stderr.strip().splitlines()
    if command == "worker" and url not in UNPARSEABLE:
        assert proc.returncode == 5, (proc.returncode, everything)
        assert retries, proc.stderr  # each retry of the lease's wait is a warning line
        for line in retries:
            assert "127.0.0.1" in json.loads(line)["error"], line
    else:
        assert proc.returncode == 2, (proc.returncode, everything)
        assert not retries, proc.stderr
    lines = [last]
    prog = COMMANDS[command][0]
    assert lines[0].startswith(f"{prog}: error:" if prog == "taskboard-tui"
                               else f"taskboard {COMMANDS[command][1]}: error:"), lines[0]
    # The message still says which database and what is wrong, masked.
    assert "127.0.0.1" in lines[0] and "***" in lines[0], lines[0]


@pytest.mark.parametrize("url", UNPARSEABLE)
def test_a_url_libpq_cannot_parse_is_refused_naming_the_variable(
    outputs: dict[tuple[str, str], subprocess.CompletedProcess[str]], url: str
) -> None:
    line = outputs[url, "status"].stderr.strip()
    assert "TASKBOARD_DATABASE_URL is not a valid connection string" in line, line
    assert secrets.MASK in line


# What a worker process does with its URL and its logs, then records as psycopg_pool
# writes them while it retries a connection (libpq's message in each), and one of ours.
LOGGING_SCRIPT = """
import logging, os, sys
from taskboard.core.runtime import logs
from taskboard.core.runtime.db import open_database
from taskboard.core.base.errors import ConfigError

try:
    open_database()
except ConfigError:
    pass  # refused, but its password was registered first
logs.configure("json", logging.INFO)
pool_log = logging.getLogger("psycopg.pool")
pool_log.warning("error connecting in %r: %s", "taskboard-w",
                 'invalid percent-encoded token: "s3cr3t%PW"')
pool_log.warning('error connecting in taskboard-w: missing "=" after "PW"')
pool_log.warning("reconnecting to %s", sys.argv[1])
try:
    raise ValueError('failed to resolve host "PW@127.0.0.1"')
except ValueError:
    pool_log.exception("connection attempt failed")
logging.getLogger("taskboard.worker").warning(
    "database unavailable",
    extra={"fields": {"error": 'token "s3cr3t%PW"', "nested": {"dsn": sys.argv[1]},
                      "list": ["s3cr3t PW"]}},
)
"""


@pytest.mark.parametrize("url", list(URLS))
def test_worker_json_logs_mask_what_libraries_log(url: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["TASKBOARD_DATABASE_URL"] = URLS[url]
    proc = subprocess.run(
        [sys.executable, "-c", LOGGING_SCRIPT, URLS["URL, bare /"]],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 5, proc.stderr
    for line in lines:
        json.loads(line)
    for piece in PIECES:
        assert piece not in proc.stderr, f"{piece!r} leaked: {proc.stderr}"
    assert "maya:***@127.0.0.1:1/app" in proc.stderr  # the URL logged is there, masked


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgres://maya:s3cr3t%PW@127.0.0.1:1/app", "postgres://maya:***@127.0.0.1:1/app"),
        ("host=127.0.0.1 port=1 password=s3cr3t PW dbname=app",
         "host=127.0.0.1 port=1 password=*** dbname=app"),
        ("postgres://maya@h/app?password=s3cr3t%PW&sslmode=require",
         "postgres://maya@h/app?password=***&sslmode=require"),
        # Unencoded '/', '@', '#' and '?' in a password: urlsplit would cut the URL there.
        ("postgres://maya:s3cr3t/PW@h/app", "postgres://maya:***@h/app"),
        ("postgres://maya:s3cr3t@PW@h/app", "postgres://maya:***@h/app"),
        ("postgres://maya:s3cr3t#PW@h/app", "postgres://maya:***@h/app"),
        ("postgres://maya:s3cr3t?PW@h/app", "postgres://maya:***@h/app"),
        # An '@' in the path or query is not after a password.
        ("postgres://h:5432/app?sslrootcert=/certs/a@b", "postgres://h:5432/app?sslrootcert=/certs/a@b"),
        ("postgres://[::1]:5432/app?x=a@b", "postgres://[::1]:5432/app?x=a@b"),
    ],
)
def test_mask_dsn_masks_every_form_of_password(dsn: str, shown: str) -> None:
    assert secrets.mask_dsn(dsn) == shown


def test_one_line_masks_urls_inside_messages_and_escapes_line_breaks() -> None:
    text = ("cannot connect to postgres://maya:s3cr3t@h/app: failed (see postgres://u:pw@h/x)"
            "\nDETAIL: password=abc\u2028\x1b[31m\udcff\u202e")
    line = secrets.one_line(text)
    assert line == (
        "cannot connect to postgres://maya:***@h/app: failed (see postgres://u:***@h/x)"
        "\\nDETAIL: password=***\\u2028\\x1b[31m\\udcff\\u202e"
    ), line
    assert secrets.one_line("queue 'a\tb'\r\n") == "queue 'a\\tb'"


@pytest.mark.parametrize("text", [
    "postgres://maya:s3cr3t@h/app", "x://y", "password=s3cr3t", "PassWord = 's3 cr3t'",
    # Non-ASCII letters that the pattern's IGNORECASE folds onto ASCII ones (long s).
    "pa\u017f\u017fword=s3cr3t", "host=h pas\u017fword=s3cr3t", "\uff50assword=x password=y",
    "\u0130 password=s3cr3t",
])
def test_the_quick_look_before_masking_never_skips_a_text_the_pattern_masks(text: str) -> None:
    """Log fields are checked for a connection string only when they could hold one (the
    pattern needs "://" or the word password): the check must agree with the pattern."""
    assert secrets._SECRET_IN_TEXT.search(text) is not None
    assert secrets._may_hold_a_dsn(text)
    assert "s3cr3t" not in secrets.mask_text(text)


def test_a_secret_registered_after_a_log_line_is_scrubbed_from_the_next() -> None:
    """`scrub` reads the secrets sorted once per registration, not per message."""
    secrets.register("zq-late-registered-9")
    secrets.register("zq-late")
    assert secrets.scrub("a zq-late-registered-9 b zq-late c") == "a *** b *** c"
