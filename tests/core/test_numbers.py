"""klique/numbers.py, the one owner of how a figure reads: exact strings, and no Django in it."""

import subprocess
import sys
from decimal import Decimal

import pytest

from klique import numbers


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("80.000", "80"),
        (Decimal("0.500"), "0.5"),
        (Decimal("2.125"), "2.125"),
        (Decimal("1024"), "1,024"),
        (3, "3"),
        (0, "0"),
        (None, "—"),
    ],
)
def test_gpus_are_whole_or_have_the_digits_they_need(value, shown):
    assert numbers.gpus(value) == shown


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("40000.000", "40,000"),
        ("23997.964", "23,998"),
        ("2.125", "2.1"),
        ("0.25", "0.3"),
        ("0.014", "< 0.1"),
        ("0", "0"),
        ("-0.014", "0"),
        (None, "—"),
    ],
)
def test_hours_have_at_most_one_decimal_and_thousands_separators(value, shown):
    assert numbers.hours(value) == shown


@pytest.mark.parametrize(
    ("value", "shown"),
    [("-0.014", "used up"), ("0", "used up"), ("23997.964", "23,998"), ("0.04", "< 0.1"), (None, "—")],
)
def test_hours_left_at_or_below_zero_are_used_up(value, shown):
    assert numbers.hours_left(value) == shown


@pytest.mark.parametrize(
    ("value", "currency", "shown"),
    [
        ("45239", "EUR", "€45,239.00"),
        ("75.005", "eur", "€75.01"),
        ("-3.5", "USD", "-$3.50"),
        ("1200", "GBP", "£1,200.00"),
        ("1200", "SEK", "1,200.00 SEK"),
        ("-0.001", "EUR", "€0.00"),
        (None, "EUR", "—"),
    ],
)
def test_money_has_two_decimals_and_its_currency_symbol(value, currency, shown):
    assert numbers.money(value, currency) == shown


def test_counts_and_percentages():
    assert numbers.count(1234567) == "1,234,567"
    assert numbers.percent(Decimal("0.4242")) == "42 %"


def test_the_formatter_and_the_cli_import_no_django():
    code = (
        "import sys, klique.numbers, klique.client.cli; "
        "sys.exit(1 if any(m == 'django' or m.startswith('django.') for m in sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.parametrize("value", [Decimal("NaN"), Decimal("Infinity"), float("inf"), Decimal("1e30")])
def test_a_value_that_is_not_a_finite_figure_is_shown_as_none_by_every_formatter(value):
    for show in (numbers.gpus, numbers.hours, numbers.hours_left, numbers.count, numbers.percent):
        assert show(value) == numbers.NONE
    assert numbers.money(value, "EUR") == numbers.NONE


@pytest.mark.parametrize(
    ("function", "value", "written"),
    [
        (numbers.exact_gpus, 4, "4.000"),
        (numbers.exact_gpus, Decimal("0.5"), "0.500"),
        (numbers.exact_hours, Decimal("23.9985"), "23.999"),
        (numbers.exact_hours, Decimal("-0.0001"), "0.000"),
        (numbers.exact_money, Decimal("45239"), "45239.00"),
        (numbers.exact_count, 12, "12"),
        (numbers.exact_gpus, None, ""),
        (numbers.exact_gpus, float("nan"), ""),
    ],
)
def test_an_export_figure_has_a_fixed_number_of_decimals_and_no_separators(function, value, written):
    assert function(value) == written


@pytest.mark.parametrize(
    ("value", "shown"), [(10.0, "10"), (15.04, "15"), (2.5, "2.5"), (1204.0, "1,204"), (None, "—")]
)
def test_milliseconds_have_at_most_one_decimal_and_no_trailing_zero(value, shown):
    assert numbers.milliseconds(value) == shown
