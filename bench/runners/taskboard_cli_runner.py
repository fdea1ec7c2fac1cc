"""`taskboard worker` as a user runs it, for bench/cli_worker_cost.py.

taskboard_runner.py starts the engine alone. This one calls the CLI's own entry point
(`taskboard.core.cli.main.main(["worker", ...])`) in this process, so everything the command
adds is measured with it: the JSON log lines on stderr and their filters, the stand-ins,
the start-up checks. The database comes from `TASKBOARD_DATABASE_URL`, as for a user.
Arguments after the harness's own (`--url`, `--id`) go to `taskboard worker` unchanged
(e.g. `--log-level debug`); with none it runs at its defaults.

READY is printed when the worker's start line (`worker_started`) is logged: the CLI itself
says nothing on stdout, and its logs go to stderr (the harness's log file for this worker).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import protocol


class _ReadyOnStart(logging.Filter):
    """Prints READY once, when the worker's start event is logged."""

    def __init__(self) -> None:
        super().__init__()
        self.said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.said and record.getMessage() == "worker_started":
            self.said = True
            protocol.ready()
        return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--id", required=True)
    args, rest = parser.parse_known_args()
    os.environ["TASKBOARD_DATABASE_URL"] = args.url
    os.environ.pop("DATABASE_URL", None)
    # A filter on the events logger survives the CLI's logging set-up, which replaces the
    # root's handlers and sets levels but leaves other loggers' filters alone.
    logging.getLogger("taskboard.events").addFilter(_ReadyOnStart())
    from taskboard.core.cli.main import main as cli_main

    return cli_main(["worker", "--id", args.id, *rest])


if __name__ == "__main__":
    sys.exit(main())
