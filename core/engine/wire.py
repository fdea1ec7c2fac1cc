"""Reading the lease statements' rows and sending their arrays, at a cost per job that
does not show in a profile.

A grouped completion sends four arrays of a hundred elements and reads two hundred rows;
psycopg's general machinery (`class_row`, which calls a frozen dataclass's `__init__` with
keywords, and the list dumper, which looks up an adapter for every element) cost ~10 us per
no-op job of the worker's ~50 (py-spy, `bench/profile_taskboard.py`). What is here does the
same work by column name and by element type known in advance:

- `record_row(cls)`: rows as instances of a dataclass, its fields filled from the columns
  by name (checked once per result, as `class_row` checks per row: an unknown column or a
  missing field is a `TypeError`), without a call to `__init__` per row.
- `Int8Array`, `UuidArray`, `Float8Array`: lists whose dumper writes PostgreSQL's array
  literal in one `join`. The statements cast each of these parameters (`::bigint[]`,
  `::uuid[]`, `::float8[]`), so only the Python side of the adaptation changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from uuid import UUID

import psycopg
from psycopg import _queries as psycopg_queries
from psycopg.abc import Buffer
from psycopg.adapt import Dumper
from psycopg.rows import BaseRowFactory, RowMaker

T = TypeVar("T")


_factories: dict[type, Any] = {}


def record_row(cls: type[T]) -> BaseRowFactory[T]:
    """A row factory making `cls` (a dataclass without slots and `__post_init__`) from
    each row by column name; fields left out of the result keep their defaults."""
    factory: BaseRowFactory[T] | None = _factories.get(cls)
    if factory is None:
        factory = _factories[cls] = _record_row(cls)
    return factory


def _record_row(cls: type[T]) -> BaseRowFactory[T]:
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    known = {f.name for f in fields}
    required = {
        f.name for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }

    def factory(cursor: Any) -> RowMaker[T]:
        description = cursor.description
        if description is None:
            raise psycopg.ProgrammingError("the statement returned no rows to read")
        names = [column.name for column in description]
        unknown, missing = set(names) - known, required - set(names)
        if unknown or missing:
            raise TypeError(
                f"{cls.__name__}: columns {sorted(unknown)} unknown, fields {sorted(missing)} "
                "missing in the result"
            )
        new = object.__new__

        def make(values: Sequence[Any]) -> T:
            row = new(cls)
            # A frozen dataclass refuses setattr; its instance dict is the same state.
            row.__dict__.update(zip(names, values, strict=True))
            return row

        return make

    return factory


class Int8Array(list[int]):
    """A `bigint[]` parameter."""


class UuidArray(list[UUID]):
    """A `uuid[]` parameter."""


class Float8Array(list[float | None]):
    """A `float8[]` parameter (None: NULL)."""


def _array_dumper(name: str, element: Callable[[Any], str]) -> type[Dumper]:
    array_oid = psycopg.adapters.types[name].array_oid

    class ArrayDumper(Dumper):
        oid = array_oid

        def dump(self, obj: Any) -> Buffer:
            return ("{" + ",".join(map(element, obj)) + "}").encode()

    ArrayDumper.__name__ = f"{name.capitalize()}ArrayDumper"
    return ArrayDumper


def _float8(value: float | None) -> str:
    return "NULL" if value is None else repr(float(value))


def _uuid(value: UUID) -> str:
    return value.hex  # 32 hex digits: uuid's input takes them without dashes


# psycopg parses a statement's text for its placeholders on every execute unless the text
# is at most 4096 characters long, when it keeps the parse in an LRU cache. The claim is
# ~7,500 (its comments are part of it): parsed again for every group, ~2 us per no-op job.
# The cache holds whole statements the package's constants spell, so a longer limit costs
# only the texts themselves. (A private constant: if a psycopg release drops it, the parse
# simply goes on happening.)
if getattr(psycopg_queries, "MAX_CACHED_STATEMENT_LENGTH", 0) < 16_384:
    psycopg_queries.MAX_CACHED_STATEMENT_LENGTH = 16_384

# Process-wide: these types exist only for these parameters.
psycopg.adapters.register_dumper(Int8Array, _array_dumper("int8", str))
psycopg.adapters.register_dumper(UuidArray, _array_dumper("uuid", _uuid))
psycopg.adapters.register_dumper(Float8Array, _array_dumper("float8", _float8))
