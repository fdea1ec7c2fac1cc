"""The line protocol a bench worker process speaks to the harness on stdout.

`READY <pid>`        the worker is about to claim work.
`S <key> <seconds>`  a handler of the keyed job started, at time.monotonic() of this process
                     (Linux's CLOCK_MONOTONIC is shared by every process on the machine).

Only keyed jobs (probe and hold) report; no-op jobs print nothing, so throughput runs pay
for no output.
"""

from __future__ import annotations

import os
import sys
import time


def ready() -> None:
    """Tell the harness this worker is about to work."""
    sys.stdout.write(f"READY {os.getpid()}\n")
    sys.stdout.flush()


def started(key: str) -> None:
    """Report that a handler started; called first thing in the handler."""
    sys.stdout.write(f"S {key} {time.monotonic():.6f}\n")
    sys.stdout.flush()
