"""What a handler may be, and the plumbing of typed kinds (`KindRegistry.kind`).

A handler is a coroutine function or a plain function (run in a thread by the worker); a
typed kind's handler takes `(ctx, payload)` and is wrapped into a `(ctx)` handler of the
same nature. Imports only the payload derivation: `registry` imports this, not the reverse.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from taskboard.core.base.errors import ValidationError
from taskboard.core.kinds.payloads import JsonObject, parse_payload, payload_validator

if TYPE_CHECKING:
    from taskboard.core.kinds.registry import Handler, JobContext
    from taskboard.core.kinds.sync_context import SyncHandler, SyncJobContext


def is_sync_handler(handler: Handler | SyncHandler) -> bool:
    """Whether `handler` is a plain function (run in a thread) rather than a coroutine one."""
    return not inspect.iscoroutinefunction(handler)


def check_handler(name: str, handler: Any, *, writes_db: bool) -> None:
    """Refuse, at registration, a handler the worker would call and then fail on after its
    effects (a generator, an object with a coroutine `__call__`, a class)."""
    if inspect.iscoroutinefunction(handler):
        return
    plain = inspect.isfunction(handler) or inspect.ismethod(handler)
    if (not plain or inspect.isgeneratorfunction(handler)
            or inspect.isasyncgenfunction(handler)):
        raise TypeError(
            f"job kind {name!r}: the handler must be an `async def` or a plain `def` "
            f"function, got {type(handler).__name__} {handler!r}"
        )
    if writes_db:
        raise TypeError(
            f"job kind {name!r}: a plain `def` handler cannot use ctx.conn (an async "
            "connection); make it `async def` or register it with writes_db=False"
        )


def no_payload(payload: Any) -> JsonObject:
    if payload:
        raise ValidationError("is not a field of this kind's payload", field=str(next(
            iter(payload))))
    return {}


def payload_type(handler: Callable[..., Any]) -> type[Any] | None:
    """The annotation of the handler's second parameter (its payload), if it has one."""
    params = list(inspect.signature(handler).parameters)
    if len(params) < 2:
        return None
    hint = typing.get_type_hints(handler).get(params[1])
    if hint is None:
        raise TypeError(
            f"handler {handler.__name__}: annotate its payload parameter {params[1]!r} with "
            "a dataclass, or pass payload= to registry.kind"
        )
    return typing.cast(type[Any], hint)


def typed_handler(handler: Callable[..., Any], cls: type[Any]) -> Handler | SyncHandler:
    """A `(ctx)` handler that hands `handler` its payload as a `cls` instance, keeping
    `handler`'s nature (coroutine function or plain function: the worker runs them apart)."""
    if inspect.iscoroutinefunction(handler):
        async def run_async(ctx: JobContext) -> Any:
            return await handler(ctx, parse_payload(cls, ctx.payload))

        run_async.__wrapped__ = handler  # type: ignore[attr-defined]  # where it is defined
        return run_async

    def run_sync(ctx: SyncJobContext) -> Any:
        return handler(ctx, parse_payload(cls, ctx.payload))

    run_sync.__wrapped__ = handler  # type: ignore[attr-defined]
    return run_sync


def typed_parts(
    name: str, handler: Callable[..., Any], payload: type[Any] | None, *, writes_db: bool
) -> tuple[Callable[[Any], JsonObject], Handler | SyncHandler]:
    """(validator, `(ctx)` handler) of a typed kind: the payload's dataclass is `payload`,
    else the annotation of the handler's second parameter; none for a handler of `ctx`."""
    check_handler(name, handler, writes_db=writes_db)
    cls = payload if payload is not None else payload_type(handler)
    if cls is None:
        return no_payload, handler
    return payload_validator(cls), typed_handler(handler, cls)
