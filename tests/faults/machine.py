"""Stalls of the whole machine, seen from a thread of the harness.

A fault run shares its cores with whatever else runs (other test processes, a busy CI
host). When the machine itself stops every process for a second or more, a worker can check
its local deadline in time and reach the relay only after it: no fault of the worker's, and
the same gap a harness SIGSTOP makes. A thread that sleeps in short steps and notes when it
woke late sees those stretches (a busy harness loop does not hide them: the thread needs the
GIL only for a few bytecodes, which Python hands over every few milliseconds).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from tests.faults.evidence import Window

STEP = 0.05
LATE = 0.5  # a wake-up this late is a machine stall (loopback round trips are < 1 ms)


class MachineWatch:
    """Appends a `Window("machine", None, ...)` for every stretch the process did not run."""

    def __init__(self, windows: list[Window]) -> None:
        self._windows = windows
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="machine-watch", daemon=True)

    def __enter__(self) -> MachineWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _watch(self) -> None:
        while not self._stop.is_set():
            before = time.monotonic()
            time.sleep(STEP)
            late = time.monotonic() - before - STEP
            if late > LATE:
                end = datetime.now(UTC)
                # list.append is atomic under the GIL: the harness reads the list at the end.
                self._windows.append(
                    Window("machine", None, end - timedelta(seconds=late + STEP), end)
                )
