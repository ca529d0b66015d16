"""A duration as a person types it, for a time limit (``klique submit --time``, the portal's
submit form): the one parser; ``klique.numbers.duration`` is the one formatter.

Accepted: whole seconds ("3600"), units d, h, m and s in that order, with or without spaces
("2h30m", "90m", "1d 12h", "45s"), and a clock H:MM:SS ("2:30:00"). No Django here (the CLI
imports it)."""

import re

UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
SECONDS = re.compile(r"[0-9]+", re.ASCII)
WITH_UNITS = re.compile(
    r"(?:(?P<d>[0-9]+)\s*d)?\s*(?:(?P<h>[0-9]+)\s*h)?\s*(?:(?P<m>[0-9]+)\s*m)?\s*(?:(?P<s>[0-9]+)\s*s)?",
    re.ASCII | re.IGNORECASE,
)
CLOCK = re.compile(r"([0-9]+):([0-5][0-9]):([0-5][0-9])", re.ASCII)
EXAMPLES = '"2h30m", "90m", "1d 12h", "2:30:00" or seconds ("3600")'


class DurationError(ValueError):
    """Text that is not a duration; the message says what is accepted."""


def parse_duration(text: str) -> int:
    """The whole seconds of ``text`` (at least 1); ``DurationError`` naming the accepted forms."""
    typed = (text or "").strip()
    if SECONDS.fullmatch(typed):
        seconds = int(typed)
    elif clock := CLOCK.fullmatch(typed):
        hours, minutes, secs = (int(part) for part in clock.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    else:
        parts = WITH_UNITS.fullmatch(typed)
        if not typed or parts is None or not any(parts.groupdict().values()):
            raise DurationError(f"{text!r} is not a duration: give it as {EXAMPLES}.")
        seconds = sum(int(value) * UNITS[unit] for unit, value in parts.groupdict().items() if value)
    if seconds < 1:
        raise DurationError("A duration is at least 1 second.")
    return seconds
