"""The external services a process runs with: configured ones, or the embedded stand-ins.

With no `TASKBOARD_SMTP_URL`, mail goes to an in-process SMTP sink on loopback; with no
`STRIPE_API_KEY`/`TASKBOARD_STRIPE_API_BASE`, the Stripe SDK talks to a local endpoint.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from taskboard.core.board import Effects
from taskboard.core.services import Services, services_from_env
from taskboard.core.standins.smtp_sink import SmtpSink
from taskboard.core.standins.stripe_endpoint import StripeEndpoint


@dataclass
class Runtime:
    """Services for handlers plus the embedded stand-ins, if any were started."""

    services: Services
    sink: SmtpSink | None = None
    stripe: StripeEndpoint | None = None

    def describe(self) -> str:
        """Where mail and charges go, secrets masked."""
        return self.services.describe()

    def effects(self) -> Effects:
        """What the embedded sink and endpoint have seen, for the dashboard."""
        return Effects(
            emails=self.sink.effects_emails() if self.sink else (),
            charges=self.stripe.effects_charges() if self.stripe else (),
            smtp_target=self.services.smtp_target,
            stripe_target=self.services.stripe_target,
        )


@asynccontextmanager
async def local_runtime(
    env: Mapping[str, str], *, database_url: str | None = None
) -> AsyncIterator[Runtime]:
    """Configured services from `env`, with embedded stand-ins for what is not configured."""
    services = services_from_env(env)
    async with AsyncExitStack() as stack:
        runtime = Runtime(services)
        if services.smtp is None:
            runtime.sink = await stack.enter_async_context(SmtpSink())
            services = services.with_local_smtp(runtime.sink.host, runtime.sink.port)
        if not services.stripe.configured:
            runtime.stripe = await stack.enter_async_context(StripeEndpoint())
            services = services.with_local_stripe(runtime.stripe.base_url)
        runtime.services = services
        yield runtime


@asynccontextmanager
async def local_services(env: Mapping[str, str]) -> AsyncIterator[Services]:
    """Just the `Services` of `local_runtime`."""
    async with local_runtime(env) as runtime:
        yield runtime.services
