"""One-dimensional PostgreSQL arrays in binary, built in one pass per column.

psycopg dumps a list element by element in Python (about 1.5 µs each); at 20,000-job
batches that was a third of the enqueue's CPU, more than the validation. These build the
binary wire format (`array_send`) with C-level joins instead, and a tiny dumper per type
hands the bytes to psycopg as they are. Register the dumpers on the cursor that sends them.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg.adapt import AdaptersMap, Dumper
from psycopg.pq import Format

_HEAD = struct.Struct("!iiIii")  # ndim, has-nulls, element type, length, lower bound
_LEN = struct.Struct("!i").pack
_FLOAT8 = struct.Struct("!id").pack  # element length 8, then the value
_INT8 = struct.Struct("!iq").pack
_NULL = _LEN(-1)
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # timestamptz: microseconds since this
_MICROSECOND = timedelta(microseconds=1)
assert array("i").itemsize == 4


class _Encoded:
    """An array already in binary wire format."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class TextArray(_Encoded):
    """text[]"""


class Int4Array(_Encoded):
    """int4[]"""


class Float8Array(_Encoded):
    """float8[]"""


class TimestamptzArray(_Encoded):
    """timestamptz[]"""


def _dumper(oid: int) -> type[Dumper]:
    class _Dumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            data: bytes = obj.data
            return data

    _Dumper.oid = oid
    return _Dumper


_DUMPERS = {TextArray: _dumper(1009), Int4Array: _dumper(1007), Float8Array: _dumper(1022),
            TimestamptzArray: _dumper(1185)}


def register(adapters: AdaptersMap) -> None:
    """Let `adapters` (a cursor's) send these arrays."""
    for cls, dumper in _DUMPERS.items():
        adapters.register_dumper(cls, dumper)


def _head(oid: int, n: int, nulls: bool) -> bytes:
    return _HEAD.pack(1, int(nulls), oid, n, 1)


def text_array(values: Sequence[str], encoding: str, *, repeated: bool = False) -> TextArray:
    """`values` (none of them None) as text[], in the connection's `encoding`. With
    `repeated` (a handful of distinct values, as kinds and queues), each is encoded once."""
    if not repeated:
        return encoded_text_array([v.encode(encoding) for v in values])
    encoded = {v: _LEN(len(b := v.encode(encoding))) + b for v in dict.fromkeys(values)}
    return TextArray(_head(25, len(values), False) + b"".join([encoded[v] for v in values]))


def encoded_text_array(values: Sequence[bytes]) -> TextArray:
    """Texts already encoded in the connection's encoding, as text[]."""
    body = b"".join([part for b in values for part in (_LEN(len(b)), b)])
    return TextArray(_head(25, len(values), False) + body)


def int4_array(values: Sequence[int]) -> Int4Array:
    """`values` (each within int4) as int4[]: length 4 and the value, for each, big-endian."""
    words = array("i", bytes(8 * len(values)))
    words[0::2] = array("i", [4]) * len(values)
    words[1::2] = array("i", values)
    if sys.byteorder == "little":
        words.byteswap()
    return Int4Array(_head(23, len(values), False) + words.tobytes())


def float8_array(values: Sequence[float | None]) -> Float8Array:
    """`values` as float8[], None as NULL."""
    body = b"".join([_NULL if v is None else _FLOAT8(8, v) for v in values])
    return Float8Array(_head(701, len(values), None in values) + body)


def timestamptz_array(values: Sequence[datetime | None]) -> TimestamptzArray:
    """Aware datetimes as timestamptz[] (exact to the microsecond), None as NULL."""
    body = b"".join([
        _NULL if v is None else _INT8(8, (v - _PG_EPOCH) // _MICROSECOND) for v in values
    ])
    return TimestamptzArray(_head(1184, len(values), None in values) + body)
