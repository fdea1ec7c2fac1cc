"""Job kinds: the registry that maps a kind name to its payload validation and handler.

A kind is registered once per process. Validation runs at enqueue (bad input never reaches
the table) and again in the worker (a row written by hand with a wrong shape: a dead job).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from taskboard.core.base.errors import ValidationError
from taskboard.core.kinds.payload_rules import (
    check_payload_limit,
    check_storable,
    limit_from_env,
)
from taskboard.core.kinds.policy import KindPolicy
from taskboard.core.kinds.typed import check_handler, typed_parts

if TYPE_CHECKING:
    from taskboard.core.kinds.sync_context import SyncHandler

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class ChargeEffect:
    """A PaymentIntent Stripe answered with: money moved (status `succeeded`) or not yet."""

    payment_intent: str
    amount: int  # in the currency's smallest unit
    currency: str
    customer: str
    status: str


@dataclass(frozen=True)
class SendEffect:
    """One message an SMTP relay accepted, for these recipients (one copy each)."""

    message_id: str
    recipients: tuple[str, ...]


EffectRecord = ChargeEffect | SendEffect
Recorder = Callable[["EffectTicket", EffectRecord], Awaitable[None]]


@dataclass(frozen=True)
class EffectTicket:
    """Permission to start one external call, given by `JobContext.external`: what the call
    tells the other side about the attempt (an audit matches every effect to the attempt and
    deadline it started under), and the way to record what the other side answered."""

    job_id: int
    attempt: int  # the how-many-th claim of the job (unique per job)
    deadline: float  # the lease's local deadline, as wall-clock seconds since the epoch
    identity: str = ""  # what the job's effects are keyed by (`JobContext.identity`)
    worker_id: str = ""
    recorder: Recorder | None = field(default=None, repr=False, compare=False)

    def headers(self) -> dict[str, str]:
        """`X-Taskboard-*` headers for an email or an HTTP request."""
        return {
            "X-Taskboard-Job": str(self.job_id),
            "X-Taskboard-Attempt": str(self.attempt),
            "X-Taskboard-Deadline": f"{self.deadline:.3f}",
        }

    async def record(self, effect: EffectRecord) -> None:
        """Keep what the outside world saw, committed on its own at once (never in the
        handler's transaction), so the attempt's fate (cancelled, timed out, rejected,
        lost) cannot roll it back. Call it inside the `external` block, as soon as the
        answer is in. A write that fails is retried by the worker, never dropped, and never
        fails the job: the effect happened either way."""
        if self.recorder is None:
            raise RuntimeError("this ticket cannot record effects (no recorder was given)")
        await self.recorder(self, effect)


class JobFacts(Protocol):
    """What every handler's context holds, a coroutine's (`JobContext`) or a plain
    function's (`SyncJobContext`)."""

    @property
    def job_id(self) -> int: ...

    @property
    def kind(self) -> str: ...

    @property
    def payload(self) -> JsonObject: ...

    @property
    def attempt(self) -> int: ...

    @property
    def identity(self) -> str:
        """What this job's external effects are keyed by (Stripe's Idempotency-Key, the
        email Message-ID): a random UUID drawn at enqueue, the same on every attempt, and
        never another job's even when job ids come back after a restore or a failover."""
        ...

    @property
    def services(self) -> Any:
        """External services (SMTP settings, Stripe client) configured for this process."""
        ...

    @property
    def installation_id(self) -> str:
        """This installation's random id (kept in the database): part of idempotency keys
        so two databases sharing an external account never collide."""
        ...

    def snooze(self, seconds: float) -> NoReturn:
        """Put this job back to run again in `seconds`, without using up an attempt (the
        handler stops here; fenced like a completion). Writes through `ctx.conn` roll back."""
        ...

    def note(self, message: str) -> None:
        """Record a line about an external effect (sent, charged) for the event stream."""
        ...


class JobContext(JobFacts, Protocol):
    """What a handler gets while it runs one attempt of one job."""

    @property
    def conn(self) -> Any:
        """The psycopg AsyncConnection this job holds, inside an open transaction.

        Writes made here commit together with the fenced completion, so a stale worker's
        writes roll back with its rejected completion. Not the place for the record of an
        external effect (it would roll back too): use `EffectTicket.record`. Only kinds
        registered with `writes_db=True` have one; for the others this raises `RuntimeError`.
        """
        ...

    async def checkpoint(self) -> None:
        """Await point where a paused worker stops, and a lost lease or a passed local
        deadline raises `LeaseLost` (the handler is then stopped as for a lost lease)."""
        ...

    def external(self, what: str) -> AbstractAsyncContextManager[EffectTicket]:
        """Wrap one call with an effect outside the database (an SMTP send, an HTTP request
        that moves money). Refuses to start it (raises `LeaseLost`) once the lease is lost
        or its local deadline has passed; while inside, the call is never cut in half by
        a lost lease or a drain. Use the ticket's `headers()` on the call, and its
        `record()` for what the other side answered, before leaving the block."""
        ...

    async def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` (async or plain) once per job as step `name`, its JSON
        result committed fenced at once; later attempts get it back without running `fn`."""
        ...

    async def parent_results(self) -> dict[int, Any]:
        """{parent job id: its result} for the jobs this one waited for (`after=`)."""

    async def sleep(self, seconds: float) -> None:
        """Give the lease back (no attempt used); resume in `seconds`, steps replayed."""
        ...

    async def sleep_until(self, when: datetime | float) -> None: ...

    def hold_completion(self, seconds: float) -> None:
        """Training only: after the handler returns, keep the job (renewing) for `seconds`
        before completing it, so a trainer can stall the worker between the work and
        the completion, the article's moment."""
        ...


Validator = Callable[[Any], JsonObject]
Handler = Callable[[JobContext], Awaitable[Any]]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class JobKind(KindPolicy):
    """A registered kind of job.

    Attributes:
        name: the kind name stored in `taskboard_jobs.kind`.
        validate: returns the normalised payload or raises `ValidationError` naming the field.
        handler: the coroutine function run for each attempt, or a plain function (run in
            the worker's thread pool with a `SyncJobContext`); None for a kind this process only
            enqueues (an application that produces jobs need not import the handlers:
            its workers, elsewhere, run them, and a worker never claims a kind it cannot run).
        writes_db: whether the handler uses `ctx.conn` (its writes commit with the fenced
            completion); kinds that do not get no connection (`ctx.conn` raises) and have
            their fenced completions grouped (each row still gets its own outcome).
        cancel_safe: whether the worker may cancel the handler as soon as its lease is lost;
            kinds in the middle of an external send are left to finish and be fenced instead.
        external_effect: a short phrase for the UI about what the fence cannot retract.
        timeout: seconds an attempt may run before its handler is stopped and the job fails
            ("timed out after S s", retried by policy); a job's own timeout overrides it.
        max_payload_bytes: the largest payload (its compact JSON text in bytes) enqueue
            accepts for this kind; None: the registry's limit (1 MiB by default).
    """

    name: str
    validate: Validator
    handler: Handler | SyncHandler | None = None
    writes_db: bool = False
    cancel_safe: bool = True
    external_effect: str | None = None
    timeout: float | None = None
    max_payload_bytes: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()  # the policies' bounds
        if self.max_payload_bytes is not None:
            check_payload_limit(f"kind {self.name!r}: max_payload_bytes", self.max_payload_bytes)


class KindRegistry:
    """The kinds known to this process.

    `builtins=False` tells `--app` loading to offer this registry's kinds alone, without
    the built-in ones beside them. `max_payload_bytes`: the payload limit of kinds that set
    none; None reads it from the environment (`TASKBOARD_MAX_PAYLOAD_BYTES`), else 1 MiB.
    """

    def __init__(self, *, builtins: bool = True, max_payload_bytes: int | None = None) -> None:
        self._kinds: dict[str, JobKind] = {}
        self.builtins = builtins
        if max_payload_bytes is None:
            max_payload_bytes = limit_from_env()
        check_payload_limit("max_payload_bytes", max_payload_bytes)
        self.max_payload_bytes = max_payload_bytes

    def register(self, kind: JobKind) -> JobKind:
        """Add a kind; registering the same name twice is a programming error, and so is a
        handler that is neither a coroutine function nor a plain function."""
        if kind.name in self._kinds:
            raise ValueError(f"job kind {kind.name!r} is already registered")
        if kind.handler is not None:
            check_handler(kind.name, kind.handler, writes_db=kind.writes_db)
        self._kinds[kind.name] = kind
        return kind

    def kind(
        self, name: str, *, payload: type[Any] | None = None, writes_db: bool = False,
        cancel_safe: bool = True, external_effect: str | None = None, timeout: float | None = None,
        lease_seconds: float | None = None, max_attempts: int | None = None,
        retry_base_seconds: float | None = None, retry_max_seconds: float | None = None,
        max_running: int | None = None, rate_per_second: float | None = None,
    ) -> Callable[[F], F]:
        """Register the decorated handler as kind `name`, with a typed payload.

        The handler is `(ctx, payload)`, its payload a dataclass instance (`payload=`, or
        the annotation of its second parameter) from which validation is derived: an
        unknown or missing field or a wrong type is refused at enqueue, naming the field.
        A handler of `ctx` alone takes an empty payload. Policies: `KindPolicy`'s fields.
        """
        def declare(handler: F) -> F:
            validate, run = typed_parts(name, handler, payload, writes_db=writes_db)
            self.register(JobKind(
                name, validate, run, writes_db=writes_db, cancel_safe=cancel_safe,
                external_effect=external_effect, timeout=timeout, lease_seconds=lease_seconds,
                max_attempts=max_attempts, retry_base_seconds=retry_base_seconds,
                retry_max_seconds=retry_max_seconds, max_running=max_running,
                rate_per_second=rate_per_second))
            return handler

        return declare

    def get(self, name: str) -> JobKind:
        """Return the kind or raise `ValidationError` listing the known ones."""
        try:
            return self._kinds[name]
        except KeyError:
            known = ", ".join(sorted(self._kinds)) or "none"
            raise ValidationError(f"unknown job kind {name!r} (known: {known})") from None

    def find(self, name: str) -> JobKind | None:
        """The kind called `name`, or None."""
        return self._kinds.get(name)

    def payload_limit(self, name: str) -> int:
        """The largest payload, in bytes, a job of kind `name` may carry."""
        kind = self._kinds.get(name)
        if kind is None or kind.max_payload_bytes is None:
            return self.max_payload_bytes
        return kind.max_payload_bytes

    def check_size(self, name: str, size: int) -> None:
        """Refuse a payload of `size` bytes over its kind's limit, in one line."""
        limit = self.payload_limit(name)
        if size > limit:
            raise ValidationError(
                f"is {size} bytes, over the limit of {limit} bytes for kind {name!r}",
                field="payload",
            )

    def names(self) -> list[str]:
        """Registered kind names, sorted."""
        return sorted(self._kinds)

    def runnable(self) -> list[str]:
        """Kinds this process can run (those with a handler), sorted: what a worker claims."""
        return sorted(name for name, kind in self._kinds.items() if kind.handler is not None)

    def validate(self, name: str, payload: Any) -> JsonObject:
        """Validate `payload` for kind `name`, returning the normalised payload."""
        kind = self.get(name)
        if not isinstance(payload, Mapping):
            raise ValidationError(
                f"must be a JSON object, got {type(payload).__name__}", field="payload"
            )
        # Depth and storability first: a validator walking a payload nested a thousand deep
        # would hit Python's recursion limit before saying anything useful.
        check_storable(payload, "")
        normalised = kind.validate(dict(payload))
        check_storable(normalised, "")
        return normalised
