"""The /scim/v2/ endpoints (RFC 7644): discovery, Users and Groups. Thin: they authenticate the
provider, read the request and call ``users`` / ``groups`` / ``query``; every refusal is a SCIM
error message, never a 500 for bad input."""

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from types import ModuleType

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from scim2_models import Context

from apps.scim import groups, users
from apps.scim.auth import provider_of
from apps.scim.models import ScimGroup, ScimUser
from apps.scim.protocol import (
    CONFIG,
    POLICY,
    PROVIDER,
    GroupResource,
    ScimError,
    UserResource,
    discovery_resource,
    error_response,
    json_response,
    list_response,
)
from apps.scim.query import from_query, parameters, search


def scim_view(*methods: str):
    def decorate(view):
        @csrf_exempt
        @wraps(view)
        def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            provider = provider_of(request)
            if provider is None:
                response = error_response(
                    401, "Give an identity provider's SCIM token: Authorization: Bearer kqs_..."
                )
                response["WWW-Authenticate"] = 'Bearer realm="scim"'
                return response
            if request.method not in methods:
                response = error_response(405, f"{request.method} is not allowed here.")
                response["Allow"] = ", ".join(methods)
                return response
            try:
                return view(request, provider, *args, **kwargs)
            except ScimError as error:
                return error_response(error.status, error.detail, error.scim_type)

        return wrapper

    return decorate


def base_url(request: HttpRequest) -> str:
    return request.build_absolute_uri("/scim/v2/")


def body(request: HttpRequest):
    try:
        payload = json.loads(request.body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ScimError(400, f"The body is not JSON: {exc}", "invalidSyntax") from exc
    if not isinstance(payload, dict):
        raise ScimError(400, "The body must be a JSON object.", "invalidSyntax")
    return payload


def dumped(resource, request: HttpRequest, context: Context) -> dict:
    response_parameters = (
        parameters(from_query(request.GET), type(resource)) if request.method == "GET" else None
    )
    with POLICY:
        return resource.model_dump(scim_ctx=context, response_parameters=response_parameters)


def _by_id(rows, scim_id: str, kind: str):
    try:
        found = rows.filter(scim_id=uuid.UUID(scim_id)).first()
    except ValueError:
        found = None
    if found is None:
        raise ScimError(404, f"No {kind} {scim_id} of this identity provider.")
    return found


# Discovery


@scim_view("GET")
def service_provider_config(request, provider):
    return json_response(discovery_resource(CONFIG, f"{base_url(request)}ServiceProviderConfig"))


def _discovery_list(request, items, endpoint: str, key, scim_id: str | None):
    base = base_url(request)
    found = [discovery_resource(item, f"{base}{endpoint}/{key(item)}") for item in items]
    if scim_id is None:
        return json_response(list_response(found, len(found), 1))
    for item, resource in zip(items, found, strict=True):
        if key(item) == scim_id:
            return json_response(resource)
    raise ScimError(404, f"No {endpoint[:-1]} {scim_id}.")


@scim_view("GET")
def resource_types(request, provider, scim_id: str | None = None):
    return _discovery_list(request, list(PROVIDER.resource_types), "ResourceTypes", lambda r: r.id, scim_id)


@scim_view("GET")
def schemas(request, provider, scim_id: str | None = None):
    return _discovery_list(request, list(PROVIDER.schemas), "Schemas", lambda s: s.id, scim_id)


# Users and Groups: one set of views over the two resource types


@dataclass(frozen=True)
class ResourceKind:
    """A resource type's service module (``users`` or ``groups``: read, create, replace, patch,
    delete, as_resource), its rows, its SCIM model, the filter columns narrowed in the database,
    and its name in messages."""

    service: ModuleType
    rows: Callable
    model: type
    columns: dict[str, str]
    noun: str


USERS = ResourceKind(
    users,
    lambda provider: ScimUser.objects.filter(provider=provider).select_related("user"),
    UserResource,
    {"username": "user__username__iexact", "externalid": "external_id", "id": "scim_id"},
    "user",
)
GROUPS = ResourceKind(
    groups,
    lambda provider: ScimGroup.objects.filter(provider=provider),
    GroupResource,
    {"displayname": "display_name__iexact", "externalid": "external_id", "id": "scim_id"},
    "group",
)


@scim_view("GET", "POST")
def resource_list(request, provider, kind: ResourceKind):
    if request.method == "POST":
        service = kind.service
        row = service.create(provider, service.read(body(request), Context.RESOURCE_CREATION_REQUEST))
        resource = service.as_resource(row, base_url(request))
        return json_response(
            dumped(resource, request, Context.RESOURCE_CREATION_RESPONSE), 201, resource.meta.location
        )
    return _search(request, provider, kind)


@scim_view("POST")
def resource_search(request, provider, kind: ResourceKind):
    return _search(request, provider, kind)


def _search(request, provider, kind: ResourceKind):
    """GET with the query string, or POST .search with a SearchRequest body (RFC 7644 §3.4.3)."""
    base = base_url(request)
    raw = from_query(request.GET) if request.method == "GET" else body(request)
    return json_response(
        search(
            raw,
            kind.rows(provider),
            model=kind.model,
            columns=kind.columns,
            as_resource=lambda row: kind.service.as_resource(row, base),
        )
    )


@scim_view("GET", "PUT", "PATCH", "DELETE")
def resource_detail(request, provider, scim_id: str, kind: ResourceKind):
    base, service = base_url(request), kind.service
    with transaction.atomic():
        row = _by_id(kind.rows(provider).select_for_update(no_key=True, of=("self",)), scim_id, kind.noun)
        if request.method == "DELETE":
            service.delete(row)
            return HttpResponse(status=204)
        if request.method == "PUT":
            service.replace(row, service.read(body(request), Context.RESOURCE_REPLACEMENT_REQUEST))
        elif request.method == "PATCH":
            service.patch(row, body(request), base)
    context = (
        Context.RESOURCE_QUERY_RESPONSE if request.method == "GET" else Context.RESOURCE_REPLACEMENT_RESPONSE
    )
    return json_response(dumped(service.as_resource(row, base), request, context))


@scim_view("POST")
def root_search(request, provider):
    raise ScimError(
        501,
        "Searching several resource types at once is not supported: POST Users/.search or Groups/.search.",
    )


@scim_view("GET", "POST", "PUT", "PATCH", "DELETE")
def unknown(request, provider, path: str = ""):
    raise ScimError(404, f"/scim/v2/{path} is no SCIM endpoint.")
