"""Reading a scenario's values strictly: each reader checks one field's type and range and raises
ScenarioError naming the field. Numbers are read as decimals, so 0.1 s or 0.25 GPU stay exact.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from .budget import US_PER_S, hours_to_units
from .scenario_model import ScenarioError

MILLI = 1000


def read_object(
    v, field: str, required: tuple[str, ...], optional: tuple[str, ...], unknown: str = "unknown field"
):
    if not isinstance(v, dict):
        raise ScenarioError(f"{field}: must be an object")
    for key in required:
        if key not in v:
            raise ScenarioError(f"{field}.{key}: required")
    for key in v:
        if key not in required and key not in optional:
            raise ScenarioError(f"{field}.{key}: {unknown}")
    return v


def read_list(v, field: str) -> list:
    if not isinstance(v, list):
        raise ScenarioError(f"{field}: must be a list")
    return v


def read_name(v, field: str) -> str:
    if not isinstance(v, str) or not v:
        raise ScenarioError(f"{field}: must be a non-empty string")
    return v


def read_known(v, field: str, names, kind: str) -> str:
    name = read_name(v, field)
    if name not in names:
        raise ScenarioError(f"{field}: unknown {kind} {name!r}")
    return name


def read_bool(v, field: str) -> bool:
    if not isinstance(v, bool):
        raise ScenarioError(f"{field}: must be true or false")
    return v


def _decimal(v, field: str) -> Decimal:
    if isinstance(v, float):
        v = Decimal(repr(v))
    if isinstance(v, bool) or not isinstance(v, int | Decimal) or not Decimal(v).is_finite():
        raise ScenarioError(f"{field}: must be a number")
    d = Decimal(v)
    if d < 0:
        raise ScenarioError(f"{field}: must be >= 0, got {v}")
    return d


def _scaled(v, field: str, scale: int, unit: str) -> int:
    d = _decimal(v, field) * scale
    if d != d.to_integral_value():
        raise ScenarioError(f"{field}: must be a multiple of {unit}")
    return int(d)


def read_gpus(v, field: str) -> int:
    return _scaled(v, field, MILLI, "0.001 GPU")


def read_size(v, field: str) -> int:
    """A GPU size: a fraction in (0, 1) or a whole number of GPUs, as the domain's rule."""
    size = read_gpus(v, field)
    if size > MILLI and size % MILLI:
        raise ScenarioError(f"{field}: above 1 a GPU size must be whole, got {gpus_text(size)}")
    return size


def read_milli(v, field: str) -> int:
    return _scaled(v, field, MILLI, "0.001")


def read_us(v, field: str) -> int:
    return _scaled(v, field, US_PER_S, "1 microsecond")


def read_hours(v, field: str) -> int:
    return hours_to_units(_decimal(v, field))


def read_start(v) -> datetime:
    if not isinstance(v, str):
        raise ScenarioError("start: must be an ISO time string")
    try:
        start = datetime.fromisoformat(v)
    except ValueError:
        raise ScenarioError(f"start: {v!r} is not an ISO time") from None
    if start.tzinfo is None:
        raise ScenarioError("start: needs a UTC offset, e.g. 2025-01-06T00:00:00Z")
    return start.astimezone(UTC)


def unique_names(items, field: str) -> set[str]:
    seen = set()
    for i, item in enumerate(items):
        if item.name in seen:
            raise ScenarioError(f"{field}[{i}].name: {item.name!r} is used twice")
        seen.add(item.name)
    return seen


def gpus_text(milli: int) -> str:
    whole, frac = divmod(milli, MILLI)
    text = str(whole) if not frac else f"{whole}.{frac:03d}".rstrip("0")
    return f"{text} GPU" + ("" if milli == MILLI else "s")


def read_count(v, field: str) -> int:
    """A whole number >= 0 (seconds or a count)."""
    if isinstance(v, bool) or not isinstance(v, int | Decimal) or v < 0 or v != int(v):
        raise ScenarioError(f"{field}: must be a whole number >= 0")
    return int(v)


TIME_LIMIT_MAX_S = 2**31 - 1  # the live Task.time_limit_s is a 32-bit integer


def read_time_limit(v, field: str) -> int:
    """A time limit: whole seconds from 1 to TIME_LIMIT_MAX_S, as the live rule."""
    if isinstance(v, bool) or not isinstance(v, int | Decimal) or not Decimal(v).is_finite() or v != int(v):
        raise ScenarioError(f"{field}: must be a whole number of seconds")
    if not 1 <= v <= TIME_LIMIT_MAX_S:
        raise ScenarioError(f"{field}: must be from 1 to {TIME_LIMIT_MAX_S} seconds")
    return int(v)
