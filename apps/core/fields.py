"""Number fields for serializers and forms that read text only in plain notation
(``apps.core.numbers``), so ``"1_0"`` or ``"１"`` is a 400 naming the field, never 10 or 1.

In the API a decimal is a JSON number or a string in plain decimal notation; the schema publishes
that notation as the string's pattern, so text the schema calls invalid is refused, and the field's
digits, decimals and bounds give their own reasons. A whole number is a JSON integer, never a
string; text is a JSON string; a boolean is ``true`` or ``false``.
"""

import re
from decimal import Decimal

from django import forms
from django.db import models
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import build_basic_type
from drf_spectacular.types import OpenApiTypes
from rest_framework import serializers

from apps.core.gpus import GPU_DECIMAL_PLACES, GPU_MAX_DIGITS, parse_gpu_amount
from apps.core.numbers import NOT_A_DECIMAL, PLAIN_DECIMAL, NotPlain, plain_decimal

NOT_AN_INTEGER = 'Enter a whole number as a JSON integer (8, not "8").'


class PlainDecimalField(serializers.DecimalField):
    default_error_messages = {"invalid": NOT_A_DECIMAL}
    parse = staticmethod(plain_decimal)

    text_pattern = f"^{PLAIN_DECIMAL.pattern}$"

    def to_internal_value(self, data):
        try:
            return super().to_internal_value(self.parse(data))
        except NotPlain:
            self.fail("invalid")


class GpuAmountField(PlainDecimalField):
    """A number of GPUs: at most three decimals, read through ``parse_gpu_amount``."""

    parse = staticmethod(parse_gpu_amount)

    def __init__(self, **kwargs):
        super().__init__(max_digits=GPU_MAX_DIGITS, decimal_places=GPU_DECIMAL_PLACES, **kwargs)


class PlainIntegerField(serializers.IntegerField):
    default_error_messages = {"invalid": NOT_AN_INTEGER}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictCharField(serializers.CharField):
    """Text that arrives as a JSON string: DRF's field would read ``0`` as ``"0"``."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """``true`` or ``false``: DRF's field would also read ``"yes"``, ``"1"`` or ``1``."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class PlainDecimalFieldSchema(OpenApiSerializerFieldExtension):
    """A request's decimal: a JSON number within the bounds, or text matching ``text_pattern``."""

    target_class = PlainDecimalField
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        field = self.target
        text = {"type": "string", "format": "decimal", "pattern": field.text_pattern}
        if direction == "response":
            return text
        number = build_basic_type(OpenApiTypes.NUMBER)
        for key, bound in (("minimum", field.min_value), ("maximum", field.max_value)):
            if bound is not None:
                number[key] = float(Decimal(bound))
        return {"oneOf": [number, text]}


class PlainDecimalFormField(forms.DecimalField):
    """A form's decimal (GPUs, budget hours) read in plain notation only."""

    default_error_messages = {"invalid": NOT_A_DECIMAL}
    parse = staticmethod(plain_decimal)

    def to_python(self, value):
        if value in self.empty_values:
            return None
        try:
            value = self.parse(value.strip() if isinstance(value, str) else value)
        except NotPlain as error:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid") from error
        return super().to_python(value)


class GpuAmountFormField(PlainDecimalFormField):
    parse = staticmethod(parse_gpu_amount)

    def __init__(self, **kwargs):
        kwargs.setdefault("max_digits", GPU_MAX_DIGITS)
        kwargs.setdefault("decimal_places", GPU_DECIMAL_PLACES)
        super().__init__(**kwargs)


class PlainIntegerFormField(forms.IntegerField):
    """A form's whole number read in plain notation only: Django's field reads ``"1_0"`` as 10."""

    default_error_messages = {"invalid": "Enter a whole number. Plain notation only: ASCII digits (8)."}

    def to_python(self, value):
        if value in self.empty_values:
            return None
        text = value.strip() if isinstance(value, str) else str(value)
        if not PLAIN_INTEGER.fullmatch(text):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return super().to_python(text)


PLAIN_INTEGER = re.compile(r"-?[0-9]+", re.ASCII)

# ``formfield_overrides`` for every admin page that edits numbers (Django walks each model field's
# classes, so these two cover every decimal and integer field): the admin reads numbers as the API
# and the portal do.
PLAIN_NUMBERS = {
    models.DecimalField: {"form_class": PlainDecimalFormField},
    models.IntegerField: {"form_class": PlainIntegerFormField},
}
