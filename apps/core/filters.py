"""The API's filter backend (``DEFAULT_FILTER_BACKENDS``): django-filter, but a query parameter is
read as strictly as the schema states it, so a value the schema calls invalid is a 400 naming the
parameter rather than silently no filter.

django-filter ignores what it cannot read: ``?active=null`` or ``?submitted_before=`` filters
nothing. Here a typed parameter (not a plain text one) must not be empty, a boolean is ``true`` or
``false``, and a parameter that takes one value is not repeated.
"""

from django_filters import filters
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import serializers

BOOLEANS = {"true", "false"}


def query_errors(filterset) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    for name, declared in filterset.filters.items():
        values = filterset.data.getlist(name) if hasattr(filterset.data, "getlist") else []
        if not values:
            continue
        many = isinstance(declared, filters.MultipleChoiceFilter | filters.BaseInFilter)
        text = type(declared) is filters.CharFilter
        if len(values) > 1 and not many:
            errors[name] = ["Give this parameter once."]
        elif not text and any(value == "" for value in values):
            errors[name] = ["Give a value, or leave the parameter out."]
        elif isinstance(declared, filters.BooleanFilter) and values[0] not in BOOLEANS:
            errors[name] = ["Use true or false."]
    return errors


class StrictFilterBackend(DjangoFilterBackend):
    def get_filterset(self, request, queryset, view):
        filterset = super().get_filterset(request, queryset, view)
        if filterset is not None:
            errors = query_errors(filterset)
            if errors:
                raise serializers.ValidationError(errors)
        return filterset
