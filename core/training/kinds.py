"""The built-in kinds as the training scenario runs them: effects held a while before
completing, so a trainer can stall a worker at the article's moment."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from taskboard.core.kinds import Handler, JobContext, KindRegistry, builtin_registry


def demo_registry(hold_seconds: float) -> KindRegistry:
    """The built-in kinds, where those with an external effect keep their job a while.

    Real email and billing handlers finish in milliseconds, faster than a trainer can press
    a key; holding the job for `hold_seconds` after the send (renewing, as any long handler
    does) leaves time to stall the worker at the article's moment: sent, not yet completed.
    The hold is the completion's (`JobContext.hold_completion`): the work is done and the
    completion decided, so a worker stalled there and resumed sends its completion late and
    meets the fence, as a stalled process would.
    """
    base = builtin_registry()
    registry = KindRegistry()
    for name in base.names():
        kind = base.get(name)
        if kind.external_effect and kind.handler is not None:
            kind = dataclasses.replace(
                kind, handler=_held(cast(Handler, kind.handler), hold_seconds)
            )
        registry.register(kind)
    return registry


def _held(handler: Handler, hold_seconds: float) -> Handler:
    async def held(ctx: JobContext) -> Any:
        result = await handler(ctx)
        ctx.hold_completion(hold_seconds)
        return result

    return held
