"""The external services a process runs with: configured ones, or the embedded stand-ins.

With no `TASKBOARD_SMTP_URL`, mail goes to an SMTP sink on loopback; with no
`STRIPE_API_KEY`/`TASKBOARD_STRIPE_API_BASE`, the Stripe SDK talks to a local endpoint.
Given the database, every process of a host shares one sink and one endpoint through the
registry (`taskboard_standins`): the first registers its own, the others send there, and a
watchdog takes over when the registered one goes away.

The stand-ins this process runs (the servers, the registry's watchdog) live on their own
event loop in a thread (`LoopThread`), never on the loop of the workers or the dashboard
that use them: a sink parsing a 2 MB message, or the Stripe endpoint sleeping out its
latency, is one long stretch of its loop; on the workers' loop it delayed every renewal
(100 emails near the size limit at `--lease 10` lost every lease and sent 68 duplicates).
On their own loop the two share only the interpreter lock, which the sink's thread hands
over every `sys.getswitchinterval()`. Handlers still talk to them over loopback sockets, as
to real services; what the board reads of them (messages, charges) are plain snapshots.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from taskboard.core.base.services import Services, services_from_env
from taskboard.core.runtime.loop_thread import LoopThread
from taskboard.core.standins.registry import StandinRegistry
from taskboard.core.standins.sharing import WATCH_SECONDS, Sharing, Slot, Target
from taskboard.core.standins.smtp_sink import SmtpSink
from taskboard.core.standins.stripe_endpoint import Charge, StripeEndpoint, fetch_charges
from taskboard.core.view.board import ChargeSeen, Effects, EmailCopy, EmailSeen

log = logging.getLogger("taskboard.standins")

# Effects fields this version of the board knows (see `Runtime.effects`).
_EFFECTS_FIELDS = frozenset(f.name for f in dataclasses.fields(Effects))


class Runtime:
    """Services for handlers, plus the embedded stand-ins this process uses.

    `services` is the latest value; workers that should follow a takeover take
    `current_services` (a callable the engine asks at the start of every attempt).
    """

    def __init__(
        self,
        services: Services,
        *,
        registry: StandinRegistry | None = None,
        watch_seconds: float = WATCH_SECONDS,
    ) -> None:
        self._base = services
        self._services = services
        self._smtp: Slot[SmtpSink] | None = None
        if services.smtp is None:
            self._smtp = Slot("smtp", SmtpSink, lambda s: f"smtp://{s.host}:{s.port}")
        self._stripe: Slot[StripeEndpoint] | None = None
        if not services.stripe.configured:
            self._stripe = Slot("stripe", StripeEndpoint, lambda e: e.base_url)
        self._remote_charges: tuple[Charge, ...] = ()
        slots = [slot for slot in (self._smtp, self._stripe) if slot is not None]
        self._sharing = Sharing(
            slots, registry, changed=self._targets_changed, watch_seconds=watch_seconds
        )
        self.loop_thread = LoopThread(name="taskboard-standins")
        """Where the stand-ins and their watchdog run (see the module's docstring)."""

    # --- what handlers and the dashboard read ------------------------------------------

    @property
    def services(self) -> Services:
        """Where mail and charges go now."""
        return self._services

    def current_services(self) -> Services:
        """`services`, as a zero-argument callable for `Worker(services=...)`."""
        return self._services

    @property
    def sink(self) -> SmtpSink | None:
        """The SMTP sink this process runs, if any (None when it sends to another's)."""
        return self._smtp.own if self._smtp else None

    @property
    def stripe(self) -> StripeEndpoint | None:
        """The Stripe endpoint this process runs, if any."""
        return self._stripe.own if self._stripe else None

    @property
    def smtp_standin(self) -> Target | None:
        """The SMTP sink mail goes to (address, owner pid, ours, shared); None if configured."""
        return self._smtp.target if self._smtp else None

    @property
    def stripe_standin(self) -> Target | None:
        """The Stripe endpoint charges go to; None when Stripe is configured."""
        return self._stripe.target if self._stripe else None

    @property
    def email_scope(self) -> str:
        """Which mail `effects()` counts, in a phrase for the dashboard."""
        target = self.smtp_standin
        if target is None:
            return "not counted: mail goes to the configured SMTP server"
        if not target.ours:
            return (
                f"not counted here: mail goes to the SMTP sink of process {target.pid} "
                f"({_host_port(target.address)})"
            )
        if target.shared:
            return "this process's SMTP sink, shared by the Taskboard processes of this host"
        return "this process's SMTP sink (not shared with other processes)"

    @property
    def charge_scope(self) -> str:
        """Which charges `effects()` counts, in a phrase for the dashboard."""
        target = self.stripe_standin
        if target is None:
            return "not counted: charges go to Stripe"
        if not target.ours:
            return f"the shared Stripe endpoint of process {target.pid} ({target.address})"
        if target.shared:
            return "this process's Stripe endpoint, shared by the Taskboard processes of this host"
        return "this process's Stripe endpoint (not shared with other processes)"

    def describe(self) -> str:
        """Where mail and charges go, secrets masked."""
        return self._services.describe()

    def effects(self) -> Effects:
        """What the stand-ins have seen, for the dashboard.

        Emails only from this process's own sink; charges from its own endpoint or, when it
        uses another process's, as last read over HTTP by the watchdog (`read_effects`
        reads them now).
        """
        values: dict[str, Any] = {
            "emails": self._emails(),
            "charges": self._charges(),
            "smtp_target": self._services.smtp_target,
            "stripe_target": self._services.stripe_target,
            "email_scope": self.email_scope,
            "charge_scope": self.charge_scope,
        }
        # The scopes are shown once the board's Effects has fields for them; until then
        # they are left out rather than breaking the dashboard.
        return Effects(**{k: v for k, v in values.items() if k in _EFFECTS_FIELDS})

    async def read_effects(self) -> Effects:
        """`effects()`, with another process's charges read now rather than as last seen."""
        if self.loop_thread.running:
            await self.loop_thread.run(self._read_remote_charges())
        else:
            await self._read_remote_charges()
        return self.effects()

    def clear_records(self) -> None:
        """Forget what this process's own sink and endpoint saw (the demo starts again)."""
        if self.sink is not None:
            self.sink.clear()
        if self.stripe is not None:
            self.stripe.clear()
        self._remote_charges = ()

    def job_emails(self, job_id: int) -> tuple[EmailCopy, ...]:
        """Every copy of job `job_id`'s mail this process's sink received, oldest first,
        with the attempt its `X-Taskboard-Attempt` header names (the worker is the board's
        to fill in, from the attempts history)."""
        target, sink = self.smtp_standin, self.sink
        if target is None or not target.ours or sink is None:
            return ()
        return tuple(
            EmailCopy(m.received_at, m.message_id or "", m.stamp.attempt, None)
            for m in sink.messages()
            if m.stamp.job == job_id
        )

    def job_charges(self, job_id: int) -> tuple[ChargeSeen, ...]:
        """The charges the Stripe stand-in made for job `job_id`, with their replays."""
        return tuple(c for c in self._charges() if c.job_id == job_id)

    def _emails(self) -> tuple[EmailSeen, ...]:
        target, sink = self.smtp_standin, self.sink
        if target is None or not target.ours or sink is None:
            return ()
        return tuple(
            EmailSeen(t.at, t.message_id, t.recipient, t.subject, t.count) for t in sink.tally()
        )

    def _charges(self) -> tuple[ChargeSeen, ...]:
        target, endpoint = self.stripe_standin, self.stripe
        if target is None:
            return ()
        made = endpoint.charges() if target.ours and endpoint is not None else self._remote_charges
        return tuple(
            ChargeSeen(c.created, c.job_id, c.payment_intent, c.amount, c.currency, c.replays)
            for c in reversed(made)
        )

    # --- lifecycle ---------------------------------------------------------------------

    async def _targets_changed(self) -> None:
        # After every settlement and watchdog round: follow a takeover, re-read the charges
        # of another process's endpoint.
        self._services = self._with_targets()
        await self._read_remote_charges()

    def _with_targets(self) -> Services:
        services = self._base
        smtp = self.smtp_standin
        if smtp is not None:
            parts = urlsplit(smtp.address)
            assert parts.hostname is not None and parts.port is not None
            services = services.with_local_smtp(parts.hostname, parts.port)
        stripe = self.stripe_standin
        if stripe is not None:
            services = services.with_local_stripe(stripe.address)
        return services

    async def _read_remote_charges(self) -> None:
        target = self.stripe_standin
        if target is None or target.ours:
            self._remote_charges = ()
            return
        try:
            self._remote_charges = await fetch_charges(target.address, timeout=2.0)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError, KeyError) as exc:
            # Keep the last reading; the watchdog notices a gone endpoint and takes over.
            log.debug("could not read the shared Stripe endpoint's charges: %s", exc)


@asynccontextmanager
async def local_runtime(
    env: Mapping[str, str],
    *,
    database_url: str | None = None,
    watch_seconds: float = WATCH_SECONDS,
) -> AsyncIterator[Runtime]:
    """Configured services from `env`, with embedded stand-ins for what is not configured.

    With `database_url`, the stand-ins are shared with the other Taskboard processes of
    this host that use that database; without it (or if the database refuses the
    registry) this process runs its own.
    """
    registry = StandinRegistry(database_url) if database_url else None
    runtime = Runtime(services_from_env(env), registry=registry, watch_seconds=watch_seconds)
    standins = runtime.loop_thread
    standins.start()
    try:
        await standins.run(runtime._sharing.open())
        yield runtime
    finally:
        try:
            await standins.run(runtime._sharing.close())
        finally:
            await standins.stop()


@asynccontextmanager
async def local_services(env: Mapping[str, str]) -> AsyncIterator[Services]:
    """Just the `Services` of `local_runtime`."""
    async with local_runtime(env) as runtime:
        yield runtime.services


def _host_port(address: str) -> str:
    return urlsplit(address).netloc
