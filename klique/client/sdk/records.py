"""Turning the API's JSON into the SDK's frozen dataclasses (decimals and times parsed) and back
into plain JSON values."""

import dataclasses
import typing
from datetime import datetime
from decimal import Decimal
from typing import Any


def _convert(hint, value):
    if value is None:
        return None
    args = typing.get_args(hint)
    if Decimal in args or hint is Decimal:
        return Decimal(str(value))
    if datetime in args or hint is datetime:
        return datetime.fromisoformat(value)
    return value


def build(cls, data: dict, **extra):
    """A record from the API's JSON: the fields of ``cls``, with decimals and times parsed."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    values = {name: _convert(hints[name], data.get(name)) for name in names if name in data}
    return cls(**{**values, **extra})


def as_json(record) -> Any:
    """A record (or a list of them) as plain JSON values: decimals as strings, times in ISO 8601."""
    if isinstance(record, list | tuple):
        return [as_json(r) for r in record]
    if dataclasses.is_dataclass(record):
        return {f.name: as_json(getattr(record, f.name)) for f in dataclasses.fields(record)}
    if isinstance(record, dict):
        return {k: as_json(v) for k, v in record.items()}
    if isinstance(record, Decimal):
        return str(record)
    if isinstance(record, datetime):
        return record.isoformat()
    return record
