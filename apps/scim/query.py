"""Listing with filters and pages (RFC 7644 §3.4.2): ``filter``, ``startIndex``, ``count``,
``attributes`` and ``excludedAttributes``, parsed and matched by scim2-models.

An equality on an indexed attribute (``userName``, ``externalId``, ``displayName``, ``id``) at the
top of the filter, alone or in an ``and``, narrows the rows in the database first; every row left
is then matched against the whole filter, so any filter the grammar allows is answered exactly."""

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from django.db.models import QuerySet
from scim2_models import Context, SearchRequest
from scim2_models.path import CompareOperator, Comparison, LogicalExpr, LogicalOperator

from apps.scim.protocol import MAX_RESULTS, POLICY, ScimError, as_scim_error, list_response

LIST_PARAMETERS = ("filter", "startIndex", "count", "attributes", "excludedAttributes", "sortBy", "sortOrder")


def from_query(query: Mapping[str, str]) -> dict[str, Any]:
    """The search parameters of a GET's query string, typed as a POST /.search body holds them."""
    raw: dict[str, Any] = {k: query[k] for k in LIST_PARAMETERS if query.get(k) not in (None, "")}
    for name in ("attributes", "excludedAttributes"):
        if name in raw:
            raw[name] = [a.strip() for a in raw[name].split(",") if a.strip()]
    for name in ("startIndex", "count"):
        if name in raw:
            try:
                raw[name] = int(raw[name])
            except ValueError as exc:
                raise ScimError(
                    400, f"{name} must be a whole number, not {raw[name]!r}.", "invalidValue"
                ) from exc
    return raw


def parameters(raw: Mapping[str, Any], model) -> SearchRequest:
    try:
        with POLICY:
            return SearchRequest[model].model_validate(raw, scim_ctx=Context.SEARCH_REQUEST)
    except Exception as exc:
        error = as_scim_error(exc)
        if "filter" in raw and error.scim_type in (None, "invalidValue", "invalidSyntax"):
            error.scim_type = "invalidFilter"
        raise error from exc


def _equalities(node) -> list[Comparison]:
    if isinstance(node, Comparison) and node.op == CompareOperator.eq:
        return [node]
    if isinstance(node, LogicalExpr) and node.op == LogicalOperator.and_:
        return [term for sub in node.terms for term in _equalities(sub)]
    return []


def narrowed(rows: QuerySet, node, columns: Mapping[str, str]) -> QuerySet:
    for comparison in _equalities(node):
        path = comparison.attr_path
        column = columns.get(path.attr.lower()) if path.sub_attr is None else None
        if column is None or not isinstance(comparison.value, str):
            continue
        if column.endswith("scim_id"):
            try:
                uuid.UUID(comparison.value)
            except ValueError:
                return rows.none()
        rows = rows.filter(**{column: comparison.value})
    return rows


def search(
    raw: Mapping[str, Any],
    rows: QuerySet,
    *,
    model,
    columns: Mapping[str, str],
    as_resource: Callable[[Any], Any],
) -> dict[str, Any]:
    request = parameters(raw, model)
    start = max(request.start_index or 1, 1)
    count = MAX_RESULTS if request.count is None else min(max(request.count, 0), MAX_RESULTS)
    if request.filter:
        scim_filter = request.filter
        with POLICY:
            matched = [
                r for r in map(as_resource, narrowed(rows, scim_filter.ast, columns)) if scim_filter.match(r)
            ]
        total, page = len(matched), matched[start - 1 : start - 1 + count]
    else:
        total, page = rows.count(), [as_resource(row) for row in rows[start - 1 : start - 1 + count]]
    with POLICY:
        dumped = [r.model_dump(scim_ctx=Context.SEARCH_RESPONSE, response_parameters=request) for r in page]
    return list_response(dumped, total, start)
