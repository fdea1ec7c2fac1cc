"""Bad input, generated: every payload, job and command line either becomes a valid job or
a clear one-line error (`TaskboardError`, or argparse's exit 2) — never a traceback, never
a half-written batch. A valid job must also be storable: PostgreSQL refuses NUL characters
and lone surrogates in text and jsonb, so validation has to refuse them first.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, timedelta, timezone
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from taskboard.core import cli
from taskboard.core.base.errors import TaskboardError, ValidationError
from taskboard.core.kinds import builtin_registry
from taskboard.core.queue.jobs import NewJob, enqueue_many, validate_job

REGISTRY = builtin_registry()
CLI = [sys.executable, "-m", "taskboard.core.cli"]
KINDS = ("noop", "sleep", "email", "billing")
FAST = settings(max_examples=120, deadline=None, derandomize=True)
WITH_DB = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# -- strategies ---------------------------------------------------------------------------

# Every code point, lone surrogates and NUL included: users paste anything.
any_char = st.characters(exclude_categories=())
nasty = st.sampled_from(
    ["", " ", "\x00", "a\x00b", "\udcff", "\r\n", "é", "\U0001d518", "\u202e", "x" * 2000, "null"]
)
any_text = st.one_of(st.text(any_char, max_size=24), nasty)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.sampled_from([0, -1, 1, 2**63, -(2**63) - 1, 10**30, 10**400, 1e308, -0.0]),
    any_text,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=8,
)


def _near(*good: Any) -> st.SearchStrategy[Any]:
    """Mostly plausible values for a field, sometimes anything at all."""
    plausible = st.sampled_from(good)
    return st.one_of(plausible, plausible, plausible, any_text, json_values)


# Free text with the characters that break things spliced in often enough to matter.
free_text = st.one_of(
    st.text(any_char, max_size=30),
    st.builds(lambda a, bad, b: a + bad + b, st.text(any_char, max_size=8),
              st.sampled_from(["\x00", "\udcff", "\ud800", "\r\n", "\u202e", "\t", "\x7f"]),
              st.text(any_char, max_size=8)),
)
ids = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_", min_size=1,
              max_size=12)
display_names = free_text
address = st.one_of(
    st.sampled_from(["maya@example.com", "ops@bücher.example", "a.b+c@sub.example.org"]),
    st.builds(lambda name: f"{name} <maya@example.com>", display_names),
)
addresses = st.one_of(address, st.lists(address, min_size=1, max_size=3))
# Valid payloads of each kind, with free text wherever the kind takes free text.
VALID: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "noop": st.just({}),
    "sleep": st.fixed_dictionaries(
        {"seconds": st.one_of(st.integers(0, 86400), st.floats(0, 86400))}
    ),
    "email": st.fixed_dictionaries(
        {"to": addresses, "subject": free_text, "text": free_text},
        optional={"html": free_text, "from": address, "reply_to": addresses},
    ),
    "billing": st.fixed_dictionaries(
        {"customer": ids.map("cus_{}".format), "amount": st.integers(1, 99_999_999),
         "currency": st.sampled_from(["usd", "EUR", "gbp", "jpy"])},
        optional={"description": free_text,
                  "payment_method": ids.map("pm_{}".format)},
    ),
}
FIELD_NAMES = {
    "noop": ["seconds"],
    "sleep": ["seconds"],
    "email": ["to", "subject", "text", "html", "from", "reply_to"],
    "billing": ["customer", "amount", "currency", "description", "payment_method"],
}
junk = st.one_of(
    any_text,
    json_values,
    # 10**400: JSON allows it, PostgreSQL's jsonb keeps it, and it does not fit a float.
    st.sampled_from([0, -1, 10**9, 10**400, -(10**400), 1.5, math.nan, math.inf, True, ""]),
)


@st.composite
def payloads(draw: st.DrawFn, kind: str) -> Any:
    """A valid payload for `kind` with up to two mutations (a field replaced by junk,
    dropped, or an unknown one added); now and then not even an object."""
    if draw(st.integers(0, 14)) == 0:
        return draw(json_values)
    payload = dict(draw(VALID[kind]))
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        how = draw(st.sampled_from(["replace", "drop", "add"]))
        if how == "replace":
            payload[draw(st.sampled_from(FIELD_NAMES[kind]))] = draw(junk)
        elif how == "drop" and payload:
            payload.pop(draw(st.sampled_from(sorted(payload))))
        else:
            payload[draw(any_text)] = draw(junk)
    return payload


kinds = st.one_of(*[st.sampled_from(KINDS)] * 7,
                  any_text)
JOB_JUNK: dict[str, st.SearchStrategy[Any]] = {
    "queue": st.one_of(free_text, junk),
    "priority": st.one_of(st.sampled_from([1_000_001, -1_000_001, True, 1.5, "1"]), junk),
    "run_at": st.one_of(st.datetimes(), junk),
    "max_attempts": st.one_of(st.sampled_from([0, 1001, False, 2.0, "5"]), junk),
}


@st.composite
def jobs(draw: st.DrawFn) -> NewJob:
    """A valid job with up to two fields replaced by something else."""
    kind = draw(kinds)
    fields: dict[str, Any] = {
        "queue": draw(st.one_of(st.just("default"), free_text.filter(bool))),
        "priority": draw(st.integers(-1_000_000, 1_000_000)),
        "run_at": draw(st.one_of(st.none(), st.datetimes(
            timezones=st.sampled_from([UTC, timezone(timedelta(hours=-12))])))),
        "max_attempts": draw(st.integers(1, 1000)),
    }
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        name = draw(st.sampled_from(sorted(JOB_JUNK)))
        fields[name] = draw(JOB_JUNK[name])
    payload = draw(payloads(kind) if kind in VALID else json_values)
    return NewJob(kind, payload, **fields)


# -- the properties -----------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    """Lines as a terminal shows them: split at line feeds and carriage returns only."""
    return text.strip(" \n").replace("\r", "\n").split("\n")


@pytest.mark.parametrize(
    "payload",
    [
        {"seconds": {"\r\n": 10**400}},  # hypothesis found it: a key's line break in the path
        {"seconds": {"x" * 100_000: 10**400}},
        {"to": {"\x1b[2J": "\x00"}},
    ],
)
def test_a_field_path_from_odd_keys_stays_one_short_line(payload: dict[str, Any]) -> None:
    kind = "sleep" if "seconds" in payload else "email"
    with pytest.raises(ValidationError) as caught:
        REGISTRY.validate(kind, payload)
    _clear_error(caught.value)
    assert len(str(caught.value)) < 200 and str(caught.value).isprintable()


def _clear_error(exc: TaskboardError) -> None:
    text = str(exc)
    assert text.strip(), "an error with no message"
    assert len(_lines(text)) == 1 and "Traceback" not in text, text


def _storable(value: Any, where: str = "payload") -> None:
    """What PostgreSQL's jsonb and text accept: finite numbers, no NUL, valid UTF-8."""
    if isinstance(value, str):
        assert "\x00" not in value, f"{where} holds a NUL character: {value!r}"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise AssertionError(f"{where} is not valid UTF-8: {value!r}") from None
    elif isinstance(value, float):
        assert math.isfinite(value), f"{where} is {value}"
    elif isinstance(value, dict):
        for key, item in value.items():
            _storable(key, f"{where} key")
            _storable(item, f"{where}.{key}")
    elif isinstance(value, list):
        for item in value:
            _storable(item, f"{where}[]")
    else:
        assert value is None or isinstance(value, bool | int), f"{where}: {value!r}"


@pytest.mark.parametrize("kind", KINDS)
@FAST
@given(data=st.data())
def test_payload_is_valid_or_a_clear_error(kind: str, data: st.DataObject) -> None:
    payload = data.draw(payloads(kind))
    try:
        result = REGISTRY.validate(kind, payload)
    except ValidationError as exc:
        _clear_error(exc)
        return
    assert isinstance(result, dict)
    _storable(result)
    assert REGISTRY.validate(kind, result) == result  # normalising twice changes nothing


@FAST
@given(job=jobs())
def test_job_is_valid_or_a_clear_error(job: NewJob) -> None:
    try:
        checked = validate_job(REGISTRY, job)
    except TaskboardError as exc:
        _clear_error(exc)
        return
    assert checked.kind in KINDS
    _storable(checked.payload)
    _storable(checked.queue, "queue")
    assert checked.run_at is None or checked.run_at.tzinfo is not None


# -- enqueue against the real table: all of a batch or none of it --------------------------


@pytest.fixture
def sync_db(db_url: str) -> Iterator[tuple[asyncio.AbstractEventLoop, psycopg.AsyncConnection[Any]]]:
    """An event loop of this (sync) test and a connection on it."""
    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(psycopg.AsyncConnection.connect(db_url, autocommit=True))
    try:
        yield loop, conn
    finally:
        loop.run_until_complete(conn.close())
        loop.close()


async def _count(conn: psycopg.AsyncConnection[Any]) -> int:
    cur = await conn.execute("SELECT count(*) FROM taskboard_jobs")
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


@WITH_DB
@given(batch=st.lists(jobs(), min_size=1, max_size=4))
def test_enqueue_writes_the_whole_batch_or_nothing(
    sync_db: tuple[asyncio.AbstractEventLoop, psycopg.AsyncConnection[Any]], batch: list[NewJob]
) -> None:
    loop, conn = sync_db
    before = loop.run_until_complete(_count(conn))
    try:
        ids = loop.run_until_complete(enqueue_many(conn, REGISTRY, batch))
    except TaskboardError as exc:
        _clear_error(exc)
        assert loop.run_until_complete(_count(conn)) == before, "a rejected batch left rows"
        return
    assert len(ids) == len(batch)
    assert loop.run_until_complete(_count(conn)) == before + len(batch)


# -- the command line ---------------------------------------------------------------------

FLAGS = [
    "--payload", "--run-at", "--priority", "--queue", "--max-attempts", "--id", "--lease",
    "--renew-every", "--pool-size", "--poll", "--drain-timeout", "--retry-base", "--log-format",
    "--log-level", "--json", "--help", "-h", "--bogus",
]
COMMANDS = ["migrate", "enqueue", "worker", "status", "retry", "cancel", "history", "nope"]
VALUES = [
    "0", "-1", "1", "2.5", "nan", "inf", "-inf", "1e309", "99999999999999999999", "", " ",
    "noop", "sleep", "email", "billing", "{}", "[]", '{"seconds": 1}', "json", "text",
    "2030-01-01T00:00:00Z", "2030-01-01T00:00:00", "tomorrow", "w-1", "bad id",
]
argv_words = st.one_of(st.sampled_from(FLAGS + COMMANDS + VALUES), any_text)
argvs = st.builds(
    lambda command, rest: [command, *rest],
    st.sampled_from(COMMANDS),
    st.lists(argv_words, max_size=6),
)


def _parse(argv: list[str]) -> tuple[Any, int | None, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code: int | None = None
    args = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            args = cli.build_parser().parse_args(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return args, code, out.getvalue(), err.getvalue()


@settings(max_examples=200, deadline=None, derandomize=True)
@given(argv=argvs)
def test_argument_parsing_is_a_namespace_help_or_one_line_exit_2(argv: list[str]) -> None:
    args, code, out, err = _parse(argv)
    if code is None:
        assert args.command in COMMANDS
        return
    if code == 0:
        assert out.startswith("usage: taskboard") and not err
        return
    assert code == 2, (code, err)
    lines = _lines(err)
    assert len(lines) == 1 and lines[0].startswith("taskboard"), err


enqueue_argvs = st.builds(
    lambda kind, payload, extra: ["enqueue", kind, "--payload", payload, *extra],
    kinds,
    st.one_of(
        st.shared(kinds, key="cli-kind").flatmap(
            lambda k: (payloads(k) if k in VALID else json_values).map(
                lambda p: json.dumps(p, allow_nan=True)
            )
        ),
        any_text,
    ),
    st.lists(
        st.one_of(
            st.tuples(st.sampled_from(["--queue", "--priority", "--max-attempts", "--run-at"]),
                      st.one_of(st.sampled_from(VALUES), any_text)),
        ).map(list),
        max_size=2,
    ).map(lambda pairs: [word for pair in pairs for word in pair]),
)


@contextlib.contextmanager
def _database_env(url: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in ("TASKBOARD_DATABASE_URL", "DATABASE_URL")}
    os.environ["TASKBOARD_DATABASE_URL"] = url
    os.environ.pop("DATABASE_URL", None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _count_sync(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM taskboard_jobs").fetchone()
        assert row is not None
        return int(row[0])


@WITH_DB
@given(argv=enqueue_argvs)
def test_cli_enqueue_is_one_row_or_one_line_exit_2(db_url: str, argv: list[str]) -> None:
    before = _count_sync(db_url)
    out, err = io.StringIO(), io.StringIO()
    with _database_env(db_url), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 1
    after = _count_sync(db_url)
    if code == 0:
        assert out.getvalue().strip().isdigit() and after == before + 1, (argv, out.getvalue())
        return
    assert code == 2, (argv, code, err.getvalue())
    lines = _lines(err.getvalue())
    assert len(lines) == 1 and "Traceback" not in lines[0], err.getvalue()
    assert after == before, "a rejected enqueue wrote a row"


# -- found by the properties above, kept as plain examples ---------------------------------

STORABLE_BILLING: dict[str, Any] = {"customer": "cus_maya", "amount": 1999, "currency": "usd"}


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: REGISTRY.validate("billing", {**STORABLE_BILLING, "description": "a\x00b"}),
         "description"),
        (lambda: validate_job(REGISTRY, NewJob("noop", {}, queue="jobs\x00")), "queue"),
        (lambda: validate_job(REGISTRY, NewJob("noop", {}, queue="jobs\udcff")), "queue"),
        (lambda: REGISTRY.validate("sleep", {"seconds": 10**400}), "seconds"),
    ],
    ids=["billing-description-NUL", "queue-NUL", "queue-lone-surrogate", "sleep-huge-int"],
)
def test_text_postgresql_cannot_store_is_refused_at_validation(
    make: Callable[[], Any], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        make()
    assert caught.value.field == field


# -- real processes ------------------------------------------------------------------------

UNREACHABLE = "postgresql://maya:pw-not-shown@127.0.0.1:1/taskboard"


def _run(url: str, *args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
    env["TASKBOARD_DATABASE_URL"] = url
    return subprocess.run([*CLI, *args], env=env, capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def _one_line_exit_2(proc: subprocess.CompletedProcess[bytes], *needles: str) -> str | None:
    """None when `proc` failed the way the CLI promises; otherwise what went wrong."""
    err = proc.stderr.decode("utf-8", "replace")
    lines = _lines(err)
    if proc.returncode != 2 or len(lines) != 1 or "Traceback" in err:
        return f"exit {proc.returncode}: {err[-1500:]}"
    missing = [needle for needle in needles if needle not in lines[0]]
    return f"{lines[0]!r} does not name {missing}" if missing else None


def _run_all(cases: list[tuple[str, list[str | bytes], list[str]]]) -> list[str]:
    """Run the CLI cases at once (each is mostly interpreter start-up); list the failures."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        procs = list(pool.map(lambda case: _run(case[0], *case[1]), cases))
    failures = []
    for (_, args, needles), proc in zip(cases, procs, strict=True):
        problem = _one_line_exit_2(proc, *needles)
        if problem:
            failures.append(f"taskboard {' '.join(map(str, args))[:100]}: {problem}")
    return failures


def test_bad_flags_in_real_processes() -> None:
    # An unreachable database: a flag that passed validation would fail on connecting,
    # which names the database instead of the flag.
    cases: list[tuple[str, list[str | bytes], list[str]]] = [
        (UNREACHABLE, ["worker", "--lease", "nan"], ["--lease"]),
        (UNREACHABLE, ["worker", "--id", "two words"], ["worker id"]),
        (UNREACHABLE, ["worker", "--drain-timeout", "nan"], ["drain"]),
        (UNREACHABLE, ["enqueue", "email", "--payload", '{"to": "x"}'], ["to"]),
    ]
    failures = _run_all(cases)
    assert not failures, "\n".join(failures)


def test_unstorable_text_from_the_command_line_is_one_line_exit_2(db_url: str) -> None:
    cases: list[tuple[str, list[str | bytes], list[str]]] = [
        (db_url, ["enqueue", "billing", "--payload",
                  '{"customer": "cus_1", "amount": 100, "currency": "usd",'
                  ' "description": "\\u0000"}'], ["description"]),
        (db_url, ["enqueue", "noop", "--queue", b"jobs\xff"], ["queue"]),
        (db_url, ["enqueue", "sleep", "--payload", '{"seconds": 1' + "0" * 400 + "}"],
         ["seconds"]),
    ]
    failures = _run_all(cases)
    assert not failures, "\n".join(failures)
    assert _count_sync(db_url) == 0
