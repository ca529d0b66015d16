"""Readable numbers: the one owner of how a figure is shown to a person, on the portal's pages and
tables and in the ``klique`` CLI's tables. No Django here (``klique/client`` imports it).

- GPUs: whole GPUs as integers ("80"), fractions with the digits they need ("0.5", "2.125").
- Hours: at most one decimal ("40,000", "23,998", "2.1"); a positive figure below 0.05 shows
  "< 0.1", never "0".
- Hours left of a budget: "used up" at or below zero, never "-0.014".
- Money: two decimals with the currency's symbol ("€45,239.00"), or its code where it has none
  ("1,200.00 SEK"); a price per hour keeps the decimals it has up to four ("€2.10", "€0.0125").
- Counted words: "1 task", "3 tasks", "1 GPU", "0.5 GPUs" (``plural``).
- A form's initial value: plain notation the form reads back, no trailing zeros ("80", "2.5").
- Durations (time limits): "90 s", "45 min", "2 h 30 min", "3 d 4 h".
- Thousands separated by "," in every figure.

Exports (CSV, XLSX) write each column in one fixed format whatever the database returned (an
aggregate may come back as ``4`` on SQLite and ``4.000`` on PostgreSQL): GPUs and hours to three
decimals ("4.000"), money to two, counts whole, nothing for none (``exact_*`` below).
"""

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

NONE = "—"
USED_UP = "used up"
SYMBOLS = {"EUR": "€", "USD": "$", "GBP": "£", "JPY": "¥", "CHF": "CHF ", "INR": "₹"}
TENTH = Decimal("0.1")
CENT = Decimal("0.01")
THOUSANDTH = Decimal("0.001")


def _decimal(value) -> Decimal | None:
    if value is None or value == "":
        return None
    if isinstance(value, float):
        value = repr(value)
    try:
        amount = Decimal(value)
    except (InvalidOperation, TypeError, ValueError):
        return None
    # Not a number, infinite, or beyond what quantizing to thousandths can hold: shown as none.
    return amount if amount.is_finite() and amount.adjusted() < 24 else None


def _grouped(value: Decimal, places: int | None) -> str:
    """``value`` with thousands separators; ``places`` None keeps the digits it needs."""
    if places is None:
        text = f"{value.normalize():,f}" if value else "0"
    else:
        text = f"{value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP):,.{places}f}"
    if text.startswith("-") and not any(c in "123456789" for c in text):
        text = text[1:]  # never "-0"
    return text


def gpus(value) -> str:
    """A GPU amount: "80", "0.5", "2.125" (GPUs are held to thousandths)."""
    amount = _decimal(value)
    if amount is None:
        return NONE
    return _grouped(amount.quantize(THOUSANDTH, rounding=ROUND_HALF_UP), None)


def hours(value) -> str:
    """Hours with at most one decimal: "40,000", "2.1", "< 0.1" for a positive figure that would
    round to 0."""
    amount = _decimal(value)
    if amount is None:
        return NONE
    if 0 < amount < Decimal("0.05"):
        return "< 0.1"
    return _grouped(amount.quantize(TENTH, rounding=ROUND_HALF_UP), None)


def milliseconds(value) -> str:
    """A duration in milliseconds with at most one decimal and no trailing zero: "15", "2.5", "1,204"."""
    amount = _decimal(value)
    if amount is None:
        return NONE
    return _grouped(amount.quantize(TENTH, rounding=ROUND_HALF_UP), None)


def hours_left(value) -> str:
    """The hours left of a time budget: "used up" at or below zero."""
    amount = _decimal(value)
    if amount is None:
        return NONE
    return USED_UP if amount <= 0 else hours(amount)


def count(value) -> str:
    """A whole number with thousands separators."""
    amount = _decimal(value)
    return NONE if amount is None else _grouped(amount, 0)


def _money(amount: Decimal, currency: str, places: int) -> str:
    text = _grouped(amount, places)
    sign, text = ("-", text[1:]) if text.startswith("-") else ("", text)
    code = (currency or "").upper()
    if code in SYMBOLS:
        return f"{sign}{SYMBOLS[code]}{text}"
    return f"{sign}{text} {code}".rstrip()


def money(value, currency: str = "") -> str:
    """Two decimals with the currency's symbol: "€45,239.00", "-$3.50", "1,200.00 SEK"."""
    amount = _decimal(value)
    return NONE if amount is None else _money(amount, currency, 2)


def price(value, currency: str = "") -> str:
    """A price per hour: two decimals, or up to the four a price is held to ("€2.10", "€0.0125")."""
    amount = _decimal(value)
    if amount is None:
        return NONE
    needed = -amount.quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP).normalize().as_tuple().exponent
    return _money(amount, currency, min(max(needed, 2), 4))


def plural(value, word: str, words: str | None = None, figure=None) -> str:
    """A figure with its word, singular where the figure shows as one: "1 task", "3 tasks",
    "1 GPU", "0.5 GPUs". ``words`` is the plural where it is not ``word`` + "s"; ``figure`` writes
    the figure (``count`` unless given: ``gpus`` for GPUs, ``hours`` for hours)."""
    shown = (figure or count)(value)
    return f"{shown} {word if shown == '1' else (words or word + 's')}"


def plain(value) -> str:
    """A figure as a form's initial value: plain notation that the form reads back, without
    separators or trailing zeros ("80", "2.5", "" for none)."""
    amount = _decimal(value)
    if amount is None:
        return ""
    return f"{amount.normalize():f}" if amount else "0"


def percent(value) -> str:
    """A share in whole percent ("42 %"), from a fraction (0.42)."""
    amount = _decimal(value)
    return NONE if amount is None else f"{_grouped(amount * 100, 0)} %"


def exact(value, places: int) -> str:
    """An export's figure: ``places`` decimals, no separators; "" for none or a non-number."""
    amount = _decimal(value)
    if amount is None:
        return ""
    text = f"{amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP):f}"
    return text[1:] if text.startswith("-") and not any(c in "123456789" for c in text) else text


def exact_gpus(value) -> str:
    """GPUs in an export: "4.000" (GPUs are held to thousandths)."""
    return exact(value, 3)


def exact_hours(value) -> str:
    """Hours in an export: "23.998"."""
    return exact(value, 3)


def exact_count(value) -> str:
    """A count in an export: "12"."""
    return exact(value, 0)


def exact_money(value) -> str:
    """Money in an export: "45239.00" (the currency is a column of its own)."""
    return exact(value, 2)


def duration(seconds) -> str:
    """A duration in seconds as a person reads a time limit: "90 s", "45 min", "2 h 30 min",
    "3 d 4 h" (whole units, rounded down below the largest)."""
    if seconds is None:
        return NONE
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds:,} s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days:,} d {hours} h" if hours else f"{days:,} d"
