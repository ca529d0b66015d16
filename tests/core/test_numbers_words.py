"""klique/numbers.py's words for figures outside the tables: plurals, prices per hour and the
initial values of forms (issue 36, "numbers outside the tables")."""

from decimal import Decimal

import pytest

from klique import numbers


@pytest.mark.parametrize(
    ("value", "word", "figure", "shown"),
    [
        (1, "task", None, "1 task"),
        (3, "task", None, "3 tasks"),
        (1200, "task", None, "1,200 tasks"),
        (Decimal("1.000"), "GPU", numbers.gpus, "1 GPU"),
        (Decimal("0.500"), "GPU", numbers.gpus, "0.5 GPUs"),
        (Decimal("1.04"), "hour", numbers.hours, "1 hour"),
    ],
)
def test_plural_is_singular_exactly_where_the_figure_shows_one(value, word, figure, shown):
    assert numbers.plural(value, word, figure=figure) == shown


def test_plural_takes_an_irregular_plural():
    assert numbers.plural(2, "child", "children") == "2 children"


@pytest.mark.parametrize(
    ("value", "currency", "shown"),
    [
        (Decimal("2.1000"), "EUR", "€2.10"),
        (Decimal("0.0125"), "EUR", "€0.0125"),
        (Decimal("1234.5670"), "USD", "$1,234.567"),
        (Decimal("3"), "SEK", "3.00 SEK"),
        (None, "EUR", "—"),
    ],
)
def test_a_price_per_hour_keeps_the_decimals_it_has_up_to_four_never_trailing_zeros(value, currency, shown):
    assert numbers.price(value, currency) == shown


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (Decimal("80.000"), "80"),
        (Decimal("200.000"), "200"),
        (Decimal("0.250"), "0.25"),
        (None, ""),
        (0, "0"),
    ],
)
def test_a_forms_initial_value_is_plain_notation_without_trailing_zeros(value, shown):
    assert numbers.plain(value) == shown
