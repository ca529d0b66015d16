"""Plain number notation: the one owner of what text the API and the forms read as a number.

Python's ``int()`` and ``Decimal()`` accept far more than people mean to type: ``"1_0"`` (10),
full-width or other Unicode digits (``"１"``, ``"٣"``), exponents (``"1e1"``), a leading ``+``.
Every GPU amount and every count read from text goes through these functions instead, which take
only ASCII digits with an optional leading minus and, for decimals, one decimal point. Numbers
that arrive as JSON numbers are already numbers (JSON's own grammar has no such forms) and are
taken as they are; a float is read through its shortest text, so ``0.1`` is ``Decimal("0.1")``.
"""

import math
import re
from decimal import Decimal

PLAIN_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)
NOT_A_DECIMAL = "Enter a number. Plain decimal notation only: ASCII digits and at most one '.' (2, 0.5)."


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
