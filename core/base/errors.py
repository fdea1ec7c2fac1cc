"""Errors that reach the user.

Each one carries a one-line message that names the problem; the CLI and the dashboard
print it and exit with code 2, never with a traceback.
"""

from __future__ import annotations


class TaskboardError(Exception):
    """A problem the user can fix: bad input, bad configuration, unreachable database."""

    exit_code = 2


class ConfigError(TaskboardError):
    """A setting or flag is out of range or malformed."""


class ValidationError(TaskboardError):
    """A job's kind or payload was rejected at enqueue; nothing was written."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{_shown(field)}: {message}" if field else message)
        self.field = field


def _shown(field: str, limit: int = 80) -> str:
    """A field path fit for one line: payload keys are the user's text and may hold line
    breaks or control characters, or run to megabytes."""
    if not field.isprintable():
        field = field.encode("unicode_escape").decode("ascii")
    return field if len(field) <= limit else field[: limit - 3] + "..."


class DatabaseUnavailable(TaskboardError):
    """The database could not be reached or refused the connection."""


class DatabaseNotAnswering(DatabaseUnavailable):
    """A connection was made, then a statement got no answer in time (a frozen server, a
    pooler whose pool is full): the database is the cause, not the command's input.
    `taskboard worker` exits 5 for it, as for a database unreachable for a lease."""


class SchemaTooNew(TaskboardError):
    """The database schema was written by a newer Taskboard than this one."""


class JobNotFound(TaskboardError):
    """An operator command named a job id that does not exist or is in the wrong state."""


class NoResult(JobNotFound):
    """A job has no result to give: not finished yet, dead, cancelled, or missing (pruned).
    `state` says which: pending, scheduled, waiting (on its parents), running, dead,
    cancelled or missing."""

    def __init__(self, message: str, state: str) -> None:
        super().__init__(message)
        self.state = state


class PermanentJobError(Exception):
    """Raised by a handler for a failure that retrying cannot fix (declined card, 5xx SMTP).

    The job becomes dead at once, with the message in `last_error`.
    """


class LeaseLost(Exception):
    """Raised inside a handler at its next checkpoint once the worker lost the lease."""


class Snooze(Exception):
    """Raised by `JobContext.snooze`: put this job back for `seconds` without using up an
    attempt (fenced like a completion)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"snoozed for {seconds:g} s")
        self.seconds = seconds


class Sleep(Snooze):
    """Raised by `JobContext.sleep`: a durable sleep, a snooze that no cap turns dead (the
    wake-up time is a recorded step, so the resumed job does not sleep again)."""
