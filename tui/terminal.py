"""What `taskboard-tui` asks of its terminal and says on it outside the screen: a terminal to
read keys from and draw on, where the embedded database lives, and what a quit's drain
waits for and how each job ended (the screen is gone by then)."""

from __future__ import annotations

import contextlib
import os
import sys

from taskboard.core.fleet import ConfigError, DrainReport


def say_where(db: object) -> None:
    """Name the embedded server's data folder, if one was started."""
    data_dir = getattr(getattr(db, "embedded", None), "data_dir", None)
    if data_dir is not None:
        print(f"embedded PostgreSQL in {data_dir}", file=sys.stderr)


def need_a_terminal() -> None:
    """Refuse to open the dashboard with no terminal to read keys from or to draw on.

    Textual's terminal driver polls stdin; at its end (`</dev/null`, a supervisor, cron) the
    input thread finds it readable at every poll and spins a core for as long as the app runs.
    It draws on stderr: redirected (`2>log`), the screen fills the file and the terminal
    stays blank. textual-serve's sessions read a pipe and draw through a driver of their
    own, named in TEXTUAL_DRIVER: those are not refused."""
    if served_session():
        return
    keys, screen = _is_terminal(0), _is_terminal(2)
    if keys and screen:
        return
    what = "neither is one" if not (keys or screen) else (
        "stdin is not one" if not keys else "stderr is not one")
    raise ConfigError(
        f"the dashboard needs a terminal to read keys from (stdin) and to draw on (stderr); "
        f"{what}: run workers without a terminal with `taskboard worker`, or serve the "
        "dashboard to a browser with --serve"
    )


def served_session() -> bool:
    """A browser session's dashboard (textual-serve names its driver), not a terminal's."""
    return bool(os.environ.get("TEXTUAL_DRIVER"))


def say_drain(report: DrainReport) -> None:
    """After the screen is gone, what a quit with jobs running waits for, and then how each
    ended (nothing for an idle quit)."""
    if not report.running:
        return
    if not report.done:
        workers = f"{report.workers} embedded worker{'s' if report.workers != 1 else ''}"
        line = (f"stopping {workers}: {report.running} job{'s' if report.running != 1 else ''}"
                f" running get up to {report.drain_seconds:g} s to finish, then are released"
                " to other workers")
    else:
        ended = [f"{report.completed} completed", f"{report.released} released to other workers"]
        if report.left_to_expire:
            ended.append(f"{report.left_to_expire} left to expire (another worker takes "
                         "them after their lease)")
        if report.otherwise:
            ended.append(f"{report.otherwise} ended otherwise (failed, snoozed, cancelled or "
                         "lost)")
        line = "stopped: " + ", ".join(ended)
    # A hung-up terminal (SIGHUP) cannot be written to; the drain goes on regardless.
    with contextlib.suppress(OSError):
        print(f"taskboard-tui: {line}", file=sys.stderr, flush=True)


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False
