"""One embedded stand-in shared by the processes of a host: use the registered one while it
answers, otherwise start this process's own and register it.

A `Slot` holds that decision for one stand-in (the SMTP sink or the Stripe endpoint): the
address this process sends to now, and the stand-in it runs itself, if any. `Sharing`
settles the slots at start and re-checks them from a watchdog, so a process whose stand-in
belonged to a process that exited takes over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import urlsplit

from taskboard.core.standins.registry import (
    RegistrySession,
    RegistryUnavailable,
    StandinRegistry,
)

log = logging.getLogger("taskboard.standins")

PROBE_SECONDS = 0.5
WATCH_SECONDS = 2.0
# Exit must not hang on a database that went away first.
FORGET_SECONDS = 5.0


class StandIn(Protocol):
    """What a slot needs of a stand-in server."""

    async def start(self) -> Any: ...

    async def stop(self) -> None: ...


S = TypeVar("S", bound=StandIn)


@dataclass(frozen=True)
class Target:
    """Where this process sends: its own stand-in, or the one another process registered."""

    address: str  # a URL: smtp://127.0.0.1:2525 or http://127.0.0.1:8080
    pid: int  # the process that runs it
    ours: bool
    shared: bool  # registered, so other processes of the host may send there too


class Slot(Generic[S]):
    """The stand-in called `name` in the registry ('smtp' or 'stripe')."""

    def __init__(self, name: str, make: Callable[[], S], address_of: Callable[[S], str]) -> None:
        self.name = name
        self._make = make
        self._address_of = address_of
        self.own: S | None = None
        self.target: Target | None = None

    async def settle(self, registry: RegistrySession | None) -> None:
        """Choose where to send: the registered stand-in if it answers, else our own
        (started if need be, and registered when `registry` is given).
        `RegistryUnavailable` leaves this process on its own, unregistered stand-in.
        """
        if registry is None:
            await self._use_own()
            return
        try:
            found = await registry.find(self.name)
            if found is not None and await reachable(found.address):
                self.target = Target(found.address, found.pid, ours=False, shared=True)
            else:
                address = await self._use_own()
                await registry.register(self.name, address)
                self.target = Target(address, os.getpid(), ours=True, shared=True)
        except RegistryUnavailable:
            await self._use_own()
            raise

    async def healthy(self) -> bool:
        """Whether the target still answers (our own stand-in always does)."""
        if self.target is None:
            return False
        return self.target.ours or await reachable(self.target.address)

    @property
    def registered(self) -> str | None:
        """Our own address if we registered it (ours to forget on exit)."""
        target = self.target
        return target.address if target is not None and target.ours and target.shared else None

    async def close(self) -> None:
        """Stop our own stand-in, if we run one."""
        own, self.own = self.own, None
        self.target = None
        if own is not None:
            await own.stop()

    async def _use_own(self) -> str:
        if self.own is None:
            own = self._make()
            await own.start()
            self.own = own
        address = self._address_of(self.own)
        self.target = Target(address, os.getpid(), ours=True, shared=False)
        return address


class Sharing:
    """The slots of one process, shared through `registry` (None: never shared).

    `changed` is awaited after every settlement (targets may have moved) and after every
    watchdog round.
    """

    def __init__(
        self,
        slots: Sequence[Slot[Any]],
        registry: StandinRegistry | None,
        *,
        changed: Callable[[], Awaitable[None]],
        watch_seconds: float = WATCH_SECONDS,
    ) -> None:
        self._slots = list(slots)
        self._registry = registry
        self._changed = changed
        self._watch_seconds = watch_seconds
        self._watchdog: asyncio.Task[None] | None = None
        self._last_warning = ""

    async def open(self) -> None:
        """Settle every slot and, when shared, start the watchdog."""
        await self._settle(self._slots)
        if self._registry is not None and self._slots:
            self._watchdog = asyncio.get_running_loop().create_task(
                self._watch(), name="taskboard-standins-watchdog"
            )

    async def close(self) -> None:
        """Stop the watchdog, unregister what we registered, stop our own stand-ins."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        registered = [(slot.name, address) for slot in self._slots
                      if (address := slot.registered) is not None]
        if registered and self._registry is not None:
            try:
                # One deadline for all: a process stopping while its database does not
                # answer waited FORGET_SECONDS per stand-in, on top of its worker's own stop.
                async with asyncio.timeout(FORGET_SECONDS):
                    await self._registry.forget(registered)
            except (RegistryUnavailable, TimeoutError) as exc:
                # Harmless: whoever finds a stale row probes it and takes over.
                log.debug("could not unregister the stand-ins: %s", exc)
        for slot in self._slots:
            await slot.close()

    async def _settle(self, slots: Sequence[Slot[Any]]) -> None:
        registry = self._registry
        try:
            if registry is None:
                for slot in slots:
                    await slot.settle(None)
            else:
                async with registry.session() as session:
                    for slot in slots:
                        await slot.settle(session)
        except RegistryUnavailable as exc:
            self._registry_failed(exc)
            # Our own stand-in stays unregistered for the rest of the run: keeping the mail
            # flowing matters more than sharing, and nothing else re-registers it.
            for slot in slots:
                if not await slot.healthy():
                    await slot.settle(None)
        for slot in slots:
            if slot.target is not None:
                log.info("%s stand-in: %s", slot.name, _describe(slot.target))
        await self._changed()

    def _registry_failed(self, exc: RegistryUnavailable) -> None:
        if exc.permanent:
            # No point asking again: the table is missing or the role may not use it.
            self._registry = None
        message = (
            f"embedded stand-ins not shared with other processes: the database registry "
            f"is unavailable ({exc}); this process uses its own"
        )
        if message != self._last_warning:
            self._last_warning = message
            log.warning("%s", message)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._watch_seconds)
            try:
                gone = [slot for slot in self._slots if not await slot.healthy()]
                if gone:
                    await self._settle(gone)
                else:
                    await self._changed()
            except Exception:
                # The watchdog must outlive a bad moment (a database restart): log, go on.
                log.exception("stand-in watchdog failed; trying again")


def _describe(target: Target) -> str:
    if not target.ours:
        return f"process {target.pid}'s, at {target.address}"
    shared = "registered for this host" if target.shared else "not shared"
    return f"this process's own, at {target.address} ({shared})"


async def reachable(address: str, timeout: float = PROBE_SECONDS) -> bool:
    """Whether something accepts a TCP connection at the URL's host and port in time."""
    parts = urlsplit(address)
    if parts.hostname is None or parts.port is None:
        return False
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(parts.hostname, parts.port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True
