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
from django.core.validators import ProhibitNullCharactersValidator
from django.db import models
from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import build_basic_type
from drf_spectacular.types import OpenApiTypes
from rest_framework import serializers

from apps.core.gpus import GPU_DECIMAL_PLACES, GPU_MAX_DIGITS, parse_gpu_amount
from apps.core.numbers import NOT_A_DECIMAL, PLAIN_DECIMAL, NotPlain, plain_decimal
from apps.core.schema import NOT_BLANK_WITHOUT_NUL, WITHOUT_NUL

NOT_AN_INTEGER = 'Enter a whole number as a JSON integer (8, not "8").'


class PlainDecimalField(serializers.DecimalField):
    default_error_messages = {"invalid": NOT_A_DECIMAL}
    parse = staticmethod(plain_decimal)
    least = None  # the least value the schema states, where a rule other than min_value owns it

    text_pattern = f"^{PLAIN_DECIMAL.pattern}$"

    def to_internal_value(self, data):
        try:
            return super().to_internal_value(self.parse(data))
        except NotPlain:
            self.fail("invalid")


class GpuAmountField(PlainDecimalField):
    """A number of GPUs: at most three decimals, read through ``parse_gpu_amount``."""

    parse = staticmethod(parse_gpu_amount)
    least = 0  # never negative: ``gpu_amount_error`` refuses it, with its own words

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


def least_of(field: serializers.DecimalField):
    return field.min_value if field.min_value is not None else getattr(field, "least", None)


def decimal_text_pattern(field: serializers.DecimalField) -> str:
    """The plain decimal text ``field`` takes: its whole digits and decimals at most, no sign when
    it takes nothing below 0, nothing above 1 when that is its maximum (a GPU's free share)."""
    places = field.decimal_places
    whole = "+" if field.max_digits is None else f"{{1,{field.max_digits - places}}}"
    least = least_of(field)
    sign = "" if least is not None and least >= 0 else "-?"
    fraction = rf"0*\.[0-9]{{1,{places}}}"
    if field.max_value is not None and Decimal(field.max_value) == 1 and not sign:
        return rf"^(?:0*1(?:\.0{{0,{places}}})?|0*0(?:\.[0-9]{{0,{places}}})?|{fraction})$"
    return rf"^{sign}(?:0*[0-9]{whole}(?:\.[0-9]{{0,{places}}})?|{fraction})$"


class PlainDecimalFieldSchema(OpenApiSerializerFieldExtension):
    """A request's decimal: a JSON number within the bounds and a multiple of its smallest step
    (three decimals: 0.001), or text matching ``decimal_text_pattern``."""

    target_class = PlainDecimalField
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        field = self.target
        text = {"type": "string", "format": "decimal", "pattern": field.text_pattern}
        if direction == "response":
            return text
        text["pattern"] = decimal_text_pattern(field)
        step = Decimal(1).scaleb(-field.decimal_places)
        number = {**build_basic_type(OpenApiTypes.NUMBER), "multipleOf": float(step)}
        largest = smallest = None
        if field.max_digits is not None:
            largest = Decimal(10) ** (field.max_digits - field.decimal_places) - step
            smallest = -largest
        bounds = (least_of(field), smallest), (field.max_value, largest)
        for key, (bound, digits) in zip(("minimum", "maximum"), bounds, strict=True):
            bound = digits if bound is None else bound
            if bound is not None:
                number[key] = float(Decimal(bound))
        return {"oneOf": [number, text]}


class NoNulTextSchema(OpenApiSerializerFieldExtension):
    """A request's text field that refuses NUL (DRF's ``ProhibitNullCharactersValidator``, as
    PostgreSQL's text cannot hold it): its usual schema with the pattern ``WITHOUT_NUL``, or
    ``NOT_BLANK_WITHOUT_NUL`` where it also refuses a text that is blank once trimmed."""

    target_class = serializers.CharField
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        refuses_nul = any(isinstance(v, ProhibitNullCharactersValidator) for v in self.target.validators)
        if direction == "request" and refuses_nul and "pattern" not in schema:
            blank_refused = not self.target.allow_blank and self.target.trim_whitespace
            schema["pattern"] = NOT_BLANK_WITHOUT_NUL if blank_refused else WITHOUT_NUL
        return schema


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


class ExactlyOneOf:
    """A serializer mixin: of the fields named in ``one_of`` a request sends exactly one. Refused
    otherwise by ``exactly_one``, and described in the schema (``ExactlyOneOfSchema``)."""

    one_of: tuple[str, ...] = ()

    def exactly_one(self, data: dict) -> dict:
        if sum(name in data for name in self.one_of) != 1:
            choice = " or ".join(self.one_of)
            raise serializers.ValidationError({self.one_of[0]: f"Send either {choice}, not both or neither."})
        return data


class ExactlyOneOfSchema(OpenApiSerializerExtension):
    """A request body of an ``ExactlyOneOf`` serializer: ``oneOf`` its fields, each required."""

    target_class = ExactlyOneOf
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction == "request":
            schema["oneOf"] = [{"required": [name]} for name in self.target.one_of]
        return schema
