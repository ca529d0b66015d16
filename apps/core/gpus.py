"""GPU amounts: decimals with three places in the database, integer milli-GPUs in the engine.

A size is either a fraction in (0, 1) with at most three decimals, or a whole number of GPUs
(0 means CPU only). Never floats. Text is read only in plain ASCII decimal notation
(``apps.core.numbers``): ``"1_0"``, ``"１"`` or ``"1e1"`` is not a number of GPUs.
"""

from decimal import Decimal

from apps.core.numbers import NotPlain, plain_decimal

GPU_MAX_DIGITS = 10
GPU_DECIMAL_PLACES = 3
MILLI = 1000
# The largest GPU amount a column of those digits holds (a sum of several may be more).
GPU_COLUMN_MAX = Decimal(10 ** (GPU_MAX_DIGITS - GPU_DECIMAL_PLACES)) - Decimal(1) / MILLI


def to_milli(amount: Decimal | int | str) -> int:
    """Exact conversion of a GPU amount to milli-GPUs; refuses more than three decimals."""
    value = Decimal(amount)
    milli = value * MILLI
    if milli != milli.to_integral_value():
        raise ValueError(f"{amount} has more than {GPU_DECIMAL_PLACES} decimals")
    return int(milli)


def from_milli(milli: int) -> Decimal:
    return (Decimal(milli) / MILLI).quantize(Decimal("0.001"))


def parse_gpu_amount(amount) -> Decimal:
    """A GPU amount as a ``Decimal``: a JSON number, a ``Decimal`` or plain decimal text, else
    ``NotPlain``. Every field that reads GPUs (API, portal, admin) reads them through this."""
    return plain_decimal(amount)


def gpu_amount_error(amount) -> str | None:
    """The reason a GPU amount (a capacity, a reservation, a limit) is invalid, or None."""
    try:
        value = parse_gpu_amount(amount)
    except NotPlain:
        return "Enter a number of GPUs in plain decimal notation (e.g. 2 or 0.5)."
    if not value.is_finite():
        return "Enter a finite number of GPUs."
    if value < 0:
        return "A number of GPUs cannot be negative."
    if value != value.quantize(Decimal("0.001"), rounding="ROUND_DOWN"):
        return "GPUs have at most 3 decimals."
    return None


def gpu_size_error(amount) -> str | None:
    """The reason a GPU size is invalid, or None when it is a valid fraction or whole number."""
    error = gpu_amount_error(amount)
    if error:
        return error
    value = parse_gpu_amount(amount)
    if value > 1 and value != value.to_integral_value():
        return "A GPU size above 1 must be a whole number of GPUs; fractions are between 0 and 1."
    return None
