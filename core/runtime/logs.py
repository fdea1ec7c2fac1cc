"""Structured logs on stderr: one JSON object (or key=value text line) per record, worker
events included (which ones at which level: `EventLogger`)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from taskboard.core.base import tracing_attempts
from taskboard.core.base.secrets import ScrubFilter
from taskboard.core.engine.events import Event, PoolStats, Renewed, is_routine


class JsonFormatter(logging.Formatter):
    """Formats records as JSON lines; `extra={"fields": {...}}` adds structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            # An event line is named by its "event"; any other line keeps its message.
            if "msg" not in fields and "event" not in fields:
                data["msg"] = record.getMessage()
            data.update(fields)
        else:
            data["msg"] = record.getMessage()
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(data, default=str)


class TraceIds(logging.Filter):
    """Puts `trace_id` and `span_id` among a record's fields while an attempt (or any traced
    operation) is current, or when the record names the token of an attempt under way."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = getattr(record, "fields", None)
        ids = tracing_attempts.log_ids(fields if isinstance(fields, dict) else None)
        if ids is not None:
            extra = {"trace_id": ids[0], "span_id": ids[1]}
            record.fields = {**fields, **extra} if isinstance(fields, dict) else extra
        return True


class TextFormatter(logging.Formatter):
    """Plain lines for people: time, level, logger, message, then every structured field as
    `key=value` (a value with a space, a quote, an `=` or nothing in it is JSON-quoted, so a
    line splits back into its fields)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if not isinstance(fields, dict):
            return line
        pairs = [
            f"{key}={_text_value(value)}"
            for key, value in fields.items()
            if not (key == "event" and value == record.getMessage())  # said as the message
        ]
        if not pairs:
            return line
        head, newline, rest = line.partition("\n")  # an exception's lines stay after it
        return head + " " + " ".join(pairs) + newline + rest


def _text_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text and text.isprintable() and not any(c in text for c in ' "=\\'):
        return text
    return json.dumps(text)


def configure(fmt: str = "json", level: int = logging.INFO, stream: TextIO | None = None) -> None:
    """Send Taskboard's logs to `stream` (stderr) as JSON lines or plain text."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(ScrubFilter())  # no password in any record, ours or a library's
    handler.addFilter(TraceIds())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    # The root logger gets the same handler so libraries' warnings (psycopg_pool's
    # "discarding closed connection" during a database restart) stay JSON lines too.
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    ours = logging.getLogger("taskboard")
    ours.handlers[:] = []
    ours.setLevel(level)
    ours.propagate = True


class EventLogger:
    """Subscribes to an `EventBus` and logs each event as structured fields.

    The INFO stream is a readable story of what an operator acts on: start and stop, a
    reclaim, a lost lease, a failed renewal, a rejected completion, a failure, a dead job.
    A routine claim and a completion happen per job, thousands a second: writing and
    scrubbing their two lines cost a no-op job three times what the engine spends on it,
    so they log at DEBUG (`every_job` puts them back at INFO; a periodic summary counts
    them, see `log_summary`). Renewals and pool stats are routine too: DEBUG.
    """

    quiet = (Renewed, PoolStats)

    def __init__(self, logger: logging.Logger | None = None, *, every_job: bool = False) -> None:
        self.logger = logger or logging.getLogger("taskboard.events")
        self.job_level = logging.INFO if every_job else logging.DEBUG

    @property
    def wants_every_job(self) -> bool:
        """Whether a routine claim or completion would be written at the logger's level
        now: when not, the bus need not even build those events for this subscriber."""
        return self.logger.isEnabledFor(self.job_level)

    def level_of(self, event: Event) -> int:
        """The level `event` is logged at."""
        if is_routine(event):
            return self.job_level
        return logging.DEBUG if isinstance(event, self.quiet) else logging.INFO

    def __call__(self, event: Event) -> None:
        """Log one event."""
        level = self.level_of(event)
        logger = self.logger
        if logger.isEnabledFor(level):
            # Built here rather than by `logger.log`, which walks the stack for the caller's
            # file and line (this method's, on every line; no format shows them): two
            # events per job made that walk a tenth of a logged job's cost.
            name = event.name
            logger.handle(logger.makeRecord(
                logger.name, level, "(event)", 0, name, (), None, extra={"fields": event.as_dict()}
            ))


def dashboard_logging(log_file: str | None) -> None:
    """The dashboard's logs: none on its terminal (they would tear the screen); with a file
    named, everything from INFO to it, scrubbed of secrets like every other log."""
    handler: logging.Handler = (
        logging.FileHandler(log_file) if log_file else logging.NullHandler()
    )
    handler.addFilter(TraceIds())
    handler.setFormatter(TextFormatter())
    handler.addFilter(ScrubFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if log_file else logging.CRITICAL)
