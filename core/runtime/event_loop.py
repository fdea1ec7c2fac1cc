"""Which event loop the `taskboard` command runs on.

uvloop where it is installed (a dependency everywhere it has wheels, i.e. not on Windows),
else the standard loop; `TASKBOARD_EVENT_LOOP=asyncio` asks for the standard one (to rule
the loop out when chasing a problem). A worker spends less CPU per job on uvloop
(bench/results-uvloop.md), and it is what PgQueuer's `pgq run` uses, which the benchmarks
compare with. The dashboard (`taskboard-tui`) stays on the loop Textual starts, and a
metrics scrape runs its query on a short-lived standard loop of its own (metrics_jobs.py).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from taskboard.core.base.errors import ConfigError

ENV = "TASKBOARD_EVENT_LOOP"
CHOICES = ("uvloop", "asyncio")

T = TypeVar("T")


def runner(environ: Mapping[str, str] = os.environ) -> Callable[
    [Coroutine[Any, Any, T]], T
]:
    """`asyncio.run` or `uvloop.run`, as the environment asks; checked before any
    coroutine exists, so a bad setting is one line and no "never awaited" warning."""
    asked = environ.get(ENV, "").strip().lower()
    if asked and asked not in CHOICES:
        raise ConfigError(f"{ENV}={environ[ENV]!r}: expected one of {', '.join(CHOICES)}")
    if asked == "asyncio":
        return asyncio.run
    if importlib.util.find_spec("uvloop") is None:
        if asked == "uvloop":
            raise ConfigError(f"{ENV}=uvloop: uvloop is not installed on this platform")
        return asyncio.run
    import uvloop

    return uvloop.run


def running() -> str:
    """The running loop's family, for logs: `uvloop` or `asyncio`."""
    return type(asyncio.get_running_loop()).__module__.split(".")[0]
