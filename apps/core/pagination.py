"""Pagination of the API's lists: ``?limit=&offset=``, 50 a page by default, at most 200.

A ``limit`` above the most is clamped to it; a ``limit`` or ``offset`` that is not a whole number
(empty included, or a limit below 1, an offset below 0) answers 400 naming the parameter. An
offset past the end gives an empty page. No value reaches the database as an out-of-range
integer, so none answers 500.
"""

from rest_framework import serializers
from rest_framework.pagination import LimitOffsetPagination

MAX_LIMIT = 200


def _whole_number(request, name: str, *, minimum: int) -> int | None:
    """The parameter as a whole number; beyond 18 digits it counts as 10**18 (past any list)."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    text = raw.strip()
    digits = text.lstrip("0") or "0"
    value = (int(digits) if len(digits) <= 18 else 10**18) if text.isascii() and text.isdigit() else None
    if value is None or value < minimum:
        raise serializers.ValidationError({name: [f"Enter a whole number of at least {minimum}."]})
    return value


class LimitOffset(LimitOffsetPagination):
    max_limit = MAX_LIMIT

    def get_limit(self, request) -> int:
        limit = _whole_number(request, self.limit_query_param, minimum=1)
        return self.default_limit if limit is None else min(limit, self.max_limit)

    def get_offset(self, request) -> int:
        return _whole_number(request, self.offset_query_param, minimum=0) or 0

    def paginate_queryset(self, queryset, request, view=None):
        # Validate both before counting, so that a bad offset answers 400 even on an empty list.
        self.get_offset(request)
        return super().paginate_queryset(queryset, request, view)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.limit_query_param:
                parameter["description"] = f"Number of results to return per page (1-{self.max_limit})."
                parameter["schema"] = {**parameter["schema"], "minimum": 1}
            elif parameter["name"] == self.offset_query_param:
                parameter["schema"] = {**parameter["schema"], "minimum": 0}
        return parameters
