"""Currencies: ISO 4217 codes, three ASCII letters, stored in capitals."""

CURRENCY_ERROR = "Currency must be a three-letter ISO 4217 code, such as EUR."


def currency_error(value) -> str | None:
    """Why ``value`` is not a currency code (None when it is one, in any case): three ASCII
    letters. ``"ÉUR"`` is three letters to ``str.isalpha`` but no ISO 4217 code."""
    if not isinstance(value, str) or len(value) != 3 or not value.isascii() or not value.isalpha():
        return CURRENCY_ERROR
    return None
