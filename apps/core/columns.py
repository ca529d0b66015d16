"""django-tables2 columns every app's tables share: a figure written as a person reads it on the
page (``klique.numbers``) and exported whole."""

import django_tables2 as tables

from klique import numbers

NUMBER_ATTRS = {"td": {"class": "num"}, "th": {"class": "num"}}


class FigureColumn(tables.Column):
    """A report figure: hours, money (in the report's currency), a percentage or a count."""

    def __init__(self, kind: str, currency: str, **kwargs):
        self.kind, self.currency = kind, currency
        super().__init__(attrs=NUMBER_ATTRS, **kwargs)

    def render(self, value):
        if self.kind == "hours":
            return numbers.hours(value)
        if self.kind == "money":
            return numbers.money(value, self.currency)
        if self.kind == "percent":
            return f"{numbers.hours(value)} %"
        if self.kind == "count":
            return numbers.count(value)
        return value

    def value(self, value):
        exact = {"hours": numbers.exact_hours, "money": numbers.exact_money, "count": numbers.exact_count}
        return exact[self.kind](value) if self.kind in exact else value
