"""Cron expressions read in one zone: UTC, or the zone a schedule names, never the
database session's (workers whose sessions differ must agree on every slot).

An expression has 5 fields (minute hour day-of-month month day-of-week) or 6: croniter reads
a sixth field as *seconds*, after the other five (`0 3 * * * 30` is 03:00:30 every day,
`* * * * * *` every second). `@hourly`, `@daily`... are accepted; a seventh (year) field is
refused. An expression that names no time within `MAX_YEARS` years either way (`0 0 31 2 *`,
February 31st) is refused: it would never run.

Daylight saving, for a schedule in a zone that has it (`--tz Europe/Berlin`):
- spring forward: a wall time the clock skips (02:30 on a day that goes from 02:00 straight
  to 03:00) fires once, at the moment of the jump (03:00 local);
- fall back: a wall time that happens twice (02:30 on a day that goes from 03:00 back to
  02:00) fires once, at its first occurrence. This holds for every schedule: one that fires
  every few minutes pauses for the repeated hour. Keep such schedules in UTC (the default).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

MAX_YEARS = 5
"""An expression must name a time within this many years of now, before and after."""
_SKIPS = 4
"""Repeated hours stepped over in one search at most (one per fall-back day reached)."""
_ZONE_NAME_MAX = 64  # the longest IANA name is about half that
_MINUTE = timedelta(minutes=1)
_SECOND = timedelta(seconds=1)


class CronError(ValueError):
    """A cron expression or zone Taskboard will not evaluate; the message says why."""


def zone(name: str) -> tzinfo:
    """The zone named `name` (an IANA name such as `Europe/Berlin`), or `CronError`."""
    if name == "UTC":
        return UTC
    try:
        if len(name) > _ZONE_NAME_MAX:
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        shown = repr(name if len(name) <= _ZONE_NAME_MAX else name[:_ZONE_NAME_MAX] + "...")
        raise CronError(f"{shown} is not a time zone (e.g. 'Europe/Berlin')") from None


def check(expr: str, tz: str, now: datetime) -> None:
    """`CronError` unless `expr` is a 5- or 6-field expression with a slot within
    `MAX_YEARS` of `now` on either side, in zone `tz`."""
    zone(tz)
    fields = expr.split()
    if not croniter.is_valid(expr) or len(fields) > 6 or (
        len(fields) < 5 and not expr.startswith("@")
    ):
        raise CronError(f"{expr!r} is not a cron expression (e.g. '*/5 * * * *')")
    try:
        previous(expr, tz, now)
        following(expr, tz, now)
    except CronError:
        raise CronError(f"{expr!r} names no time within {MAX_YEARS} years: it would never "
                        "run") from None


def previous(expr: str, tz: str, now: datetime) -> datetime:
    """The latest slot before `now` (UTC), or `CronError` if there is none in reach."""
    return _walk(expr, tz, now, backwards=True)


def following(expr: str, tz: str, now: datetime) -> datetime:
    """The first slot after `now` (UTC), or `CronError` if there is none in reach."""
    return _walk(expr, tz, now, backwards=False)


def _walk(expr: str, tz: str, now: datetime, *, backwards: bool) -> datetime:
    where = zone(tz)
    start = now.astimezone(where)
    try:
        for _ in range(_SKIPS + 1):
            it = croniter(expr, start, max_years_between_matches=MAX_YEARS)
            slot: datetime = it.get_prev(datetime) if backwards else it.get_next(datetime)
            if not _second_pass(slot, where):
                return slot.astimezone(UTC)
            # Step over the whole repeated stretch at once: an every-second schedule has
            # thousands of slots in it.
            start = _first_pass_edge(slot, where, backwards=backwards)
    except CronError:
        raise
    except Exception as exc:  # croniter's errors share no base class worth naming
        raise CronError(f"{expr!r} in {tz}: {type(exc).__name__}: {exc}") from None
    raise CronError(f"{expr!r} in {tz}: no slot outside a repeated hour")


def _first_pass_edge(slot: datetime, where: tzinfo, *, backwards: bool) -> datetime:
    """Where to search again from `slot`, a second-pass slot: going forwards, one second
    before the repeated stretch ends; going backwards, its start (the search excludes it)."""
    step = -_MINUTE if backwards else _MINUTE
    edge = slot
    for _ in range(24 * 60):  # whole minutes first, then back to the exact second
        if not _second_pass(edge, where):
            break
        edge = (edge.astimezone(UTC) + step).astimezone(where)
    fine = -step // 60
    for _ in range(60):
        back = (edge.astimezone(UTC) + fine).astimezone(where)
        if _second_pass(back, where):
            break
        edge = back
    if backwards:
        return (edge.astimezone(UTC) + _SECOND).astimezone(where)
    return (edge.astimezone(UTC) - _SECOND).astimezone(where)


def _second_pass(slot: datetime, where: tzinfo) -> bool:
    """Whether `slot` is the second time its wall time happens (a fall-back's repeat)."""
    wall = slot.astimezone(where).replace(tzinfo=None)
    first = wall.replace(tzinfo=where, fold=0).utcoffset()
    second = wall.replace(tzinfo=where, fold=1).utcoffset()
    return first != second and slot.utcoffset() == second
