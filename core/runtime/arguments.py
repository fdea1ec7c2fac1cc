"""Command-line argument types shared by `taskboard` and `taskboard-tui`: errors are one
line (exit 2, no usage dump, line breaks escaped) and numbers must be finite."""

from __future__ import annotations

import argparse
import math
from importlib import metadata
from typing import NoReturn

from taskboard.core.base.secrets import one_line
from taskboard.core.engine.schema import SCHEMA_VERSION
from taskboard.core.engine.settings import DEFAULT_CONCURRENCY, MAX_CONCURRENCY

EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    """argparse, but errors are one line and exit 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        # Arguments may hold line breaks; the error must stay one line for scripts.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)}\n")


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    """`--version`: the installed Taskboard and the schema version it brings a database to,
    what a bug report or a check of a deployment asks first."""
    try:
        installed = metadata.version("taskboard")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        installed = "(not installed)"
    parser.add_argument("--version", action="version",
                        version=f"{parser.prog} {installed} (schema {SCHEMA_VERSION})")


def number(text: str) -> float:
    """A finite number (`nan` and `inf` are refused: no timer or bound makes sense of them)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def integer(text: str) -> int:
    """A whole number."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def add_concurrency(parser: argparse.ArgumentParser, *, per: str = "worker") -> None:
    """`--concurrency N`, as `taskboard worker` and `taskboard-tui` take it (the range is
    checked by `WorkerSettings`, which names the bound)."""
    parser.add_argument(
        "--concurrency",
        type=integer,
        default=None,
        help=f"jobs at once per {per}, 1 to {MAX_CONCURRENCY} (default 100 per engine "
        f"connection: {DEFAULT_CONCURRENCY} at the default pool on this host); "
        "of kinds that write to the database at most pool size - 2 (- 3 with two engine "
        "connections), one connection each",
    )
