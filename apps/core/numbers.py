"""Numbers as the code takes them in and rounds them: the one owner of what text the API and the
forms read as a number, and of how an exact figure becomes the ``Decimal`` a report holds.

Python's ``int()`` and ``Decimal()`` accept far more than people mean to type: ``"1_0"`` (10),
full-width or other Unicode digits (``"１"``, ``"٣"``), exponents (``"1e1"``), a leading ``+``.
Every GPU amount and every count read from text goes through these functions instead, which take
only ASCII digits with an optional leading minus and, for decimals, one decimal point. Numbers
that arrive as JSON numbers are already numbers (JSON's own grammar has no such forms) and are
taken as they are; a float is read through its shortest text, so ``0.1`` is ``Decimal("0.1")``.

Figures stay exact until they are shown: time as integer microseconds (GPU-microseconds, milli-GPUs
x milliseconds, for usage), money as a ``Fraction``. ``rounded`` and the helpers over it turn them
into hours, money and per cent, rounding half away from zero once. How a figure is then written
for a person is ``klique.numbers``'s.
"""

import math
import re
from decimal import Decimal
from fractions import Fraction

PLAIN_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)
NOT_A_DECIMAL = "Enter a number. Plain decimal notation only: ASCII digits and at most one '.' (2, 0.5)."
US_PER_HOUR = 3_600_000_000  # microseconds in an hour; GPU-microseconds in a GPU-hour


class NotPlain(ValueError):
    """The value is not a number in plain notation; ``str()`` is the reason, for the user."""


def plain_decimal(value) -> Decimal:
    """A ``Decimal`` from a JSON number, a ``Decimal`` or text in plain decimal notation."""
    if isinstance(value, bool):
        raise NotPlain(NOT_A_DECIMAL)
    if isinstance(value, Decimal | int):
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotPlain(NOT_A_DECIMAL)
        return Decimal(repr(value))
    if isinstance(value, str) and PLAIN_DECIMAL.fullmatch(value):
        return Decimal(value)
    raise NotPlain(NOT_A_DECIMAL)


def rounded(value: Fraction | int, places: int) -> Decimal:
    """Round half away from zero to ``places`` decimals, exactly (negative values are adjustments)."""
    scaled = abs(Fraction(value)) * 10**places
    whole, rest = divmod(scaled.numerator, scaled.denominator)
    if 2 * rest >= scaled.denominator:
        whole += 1
    return Decimal(-whole if value < 0 else whole).scaleb(-places)


def hours(us: int | Fraction) -> Decimal:
    return rounded(Fraction(us, US_PER_HOUR), 3)


def money(amount: Fraction) -> Decimal:
    return rounded(amount, 2)


def percent(part: Fraction | int, whole: Fraction | int) -> Decimal | None:
    """``part`` of ``whole`` in per cent with one decimal; None when ``whole`` is nothing."""
    return rounded(Fraction(part) * 100 / whole, 1) if whole else None
