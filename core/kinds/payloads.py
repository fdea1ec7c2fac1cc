"""Typed payloads: a stdlib dataclass describes a kind's payload, and its validation is
derived from it (fields, types, required, defaults), so a kind needs no hand-written
validator. Dataclasses rather than a model library: no new dependency, and the fields
and types are all the derivation needs.

Supported field types: `str`, `int`, `float` (an int is taken), `bool`, `Any`, `None`,
`Literal[...]`, `X | None`, unions of these, `list[X]`, `dict[str, X]` and nested
dataclasses. Anything else is refused when the kind is declared, not at the first job.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

from taskboard.core.base.errors import ValidationError

JsonObject = dict[str, Any]


def payload_validator(cls: type[Any]) -> Callable[[Any], JsonObject]:
    """A validator for payloads shaped like dataclass `cls`: the normalised payload (with
    defaults filled in) or `ValidationError` naming the field."""
    check_payload_type(cls)

    def validate(payload: Any) -> JsonObject:
        return to_payload(parse_payload(cls, payload))

    return validate


def check_payload_type(cls: Any) -> None:
    """Raise `TypeError` (one line) if `cls` is not a dataclass of supported field types."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"a typed payload must be a dataclass, got {cls!r}")
    for name, hint in _hints(cls).items():
        _check_type(hint, f"{cls.__name__}.{name}")


def parse_payload(cls: type[Any], payload: Any, path: str = "") -> Any:
    """An instance of dataclass `cls` from a JSON object, checked field by field."""
    if not isinstance(payload, dict):
        raise ValidationError(f"must be an object, got {_json_type(payload)}",
                              field=path or "payload")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in payload:
        if key not in fields:
            raise ValidationError("is not a field of this kind's payload",
                                  field=_join(path, str(key)))
    values: dict[str, Any] = {}
    for name, f in fields.items():
        where = _join(path, name)
        if name not in payload:
            if (f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING):
                raise ValidationError("is required", field=where)
            continue
        values[name] = _value(hints[name], payload[name], where)
    return cls(**values)


def to_payload(instance: Any) -> JsonObject:
    """The JSON object stored for a typed payload (nested dataclasses as objects)."""
    data: JsonObject = dataclasses.asdict(instance)
    return data


def _hints(cls: type[Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except NameError as exc:
        raise TypeError(f"the annotations of {cls.__name__} cannot be resolved: {exc}") from None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string",
            list: "array", dict: "object"}.get(type(value), type(value).__name__)


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType)


def _check_type(hint: Any, where: str) -> None:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in (str, int, float, bool, Any, object, type(None), None):
        return
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        check_payload_type(hint)
        return
    if origin is Literal and all(isinstance(a, str | int | bool) or a is None for a in args):
        return
    if _is_union(hint):
        for arg in args:
            _check_type(arg, where)
        return
    if origin is list and len(args) == 1:
        _check_type(args[0], where)
        return
    if origin is dict and len(args) == 2 and args[0] is str:
        _check_type(args[1], where)
        return
    raise TypeError(f"{where}: type {hint!r} is not supported in a typed payload "
                    "(str, int, float, bool, Literal, X | None, list, dict[str, X], dataclass)")


_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
          type(None): "null"}


def _value(hint: Any, value: Any, where: str) -> Any:
    if hint in (Any, object):
        return value
    if hint is None or hint is type(None):
        if value is None:
            return None
        raise ValidationError(f"must be null, got {_json_type(value)}", field=where)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if _is_union(hint):
        if value is None and type(None) in args:
            return None
        errors: list[ValidationError] = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _value(arg, value, where)
            except ValidationError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        raise ValidationError(f"does not match {hint}, got {_json_type(value)}", field=where)
    if origin is Literal:
        for allowed in args:
            if value == allowed and type(value) is type(allowed):
                return value
        shown = ", ".join(repr(a) for a in args)
        raise ValidationError(f"must be one of {shown}", field=where)
    if origin is list:
        if not isinstance(value, list):
            raise ValidationError(f"must be an array, got {_json_type(value)}", field=where)
        return [_value(args[0], item, f"{where}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ValidationError(f"must be an object, got {_json_type(value)}", field=where)
        return {k: _value(args[1], v, _join(where, str(k))) for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return parse_payload(hint, value, where)
    return _scalar(hint, value, where)


def _scalar(hint: Any, value: Any, where: str) -> Any:
    # bool is an int in Python but not in JSON: `true` is no count of anything.
    ok = (
        (hint is bool and isinstance(value, bool))
        or (hint is str and isinstance(value, str))
        or (hint is int and isinstance(value, int) and not isinstance(value, bool))
        or (hint is float and isinstance(value, int | float) and not isinstance(value, bool))
    )
    if not ok:
        raise ValidationError(f"must be {_NAMES[hint]}, got {_json_type(value)}", field=where)
    if hint is float:
        value = float(value) if abs(value) < 1e308 else math.inf
        if not math.isfinite(value):
            raise ValidationError("must be a finite number", field=where)
    return value
