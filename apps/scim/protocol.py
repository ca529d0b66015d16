"""The SCIM side of the wire, through scim2-models: the resources Klique serves, the policy it
reads peers under (Entra ID's and Okta's deviations accepted), its discovery documents and its
answers (``application/scim+json``, errors as RFC 7644 §3.12 Error messages)."""

import json
from typing import Any

from django.http import HttpResponse
from pydantic import ValidationError
from scim2_models import (
    AuthenticationScheme,
    Bulk,
    ChangePassword,
    Context,
    EnterpriseUser,
    Error,
    ETag,
    Filter,
    Group,
    ListResponse,
    Patch,
    PatchOp,
    ResourceType,
    SCIMException,
    ScimPolicy,
    ScimProvider,
    ServiceProviderConfig,
    Sort,
    User,
)

CONTENT_TYPE = "application/scim+json"
MAX_RESULTS = 200
UserResource = User[EnterpriseUser]
GroupResource = Group

# Unknown attributes are dropped (Entra ID and Okta send their own); a "remove" carrying a value
# removes that value, and a filtered path that matches nothing creates the entry (both as Entra
# ID sends them).
POLICY = ScimPolicy(
    unknown=ScimPolicy.Unknown.ignore,
    remove_value_as_filter=ScimPolicy.RemoveValue.apply,
    unmatched_path_filter=ScimPolicy.UnmatchedPathFilter.create,
)

CONFIG = ServiceProviderConfig(
    patch=Patch(supported=True),
    bulk=Bulk(supported=False, max_operations=0, max_payload_size=0),
    filter=Filter(supported=True, max_results=MAX_RESULTS),
    change_password=ChangePassword(supported=False),
    sort=Sort(supported=False),
    etag=ETag(supported=False),
    authentication_schemes=[
        AuthenticationScheme(
            type="oauthbearertoken",
            name="Bearer token",
            description="The identity provider's SCIM token, made with manage.py scim_provider.",
            primary=True,
        )
    ],
)

PROVIDER = ScimProvider(
    models=[User, EnterpriseUser, Group],
    resource_types=[ResourceType.from_resource(UserResource), ResourceType.from_resource(Group)],
    config=CONFIG,
    policy=POLICY,
)


class ScimError(Exception):
    """An answer other than success: HTTP status, SCIM ``scimType`` and a sentence for people."""

    def __init__(self, status: int, detail: str, scim_type: str | None = None):
        super().__init__(detail)
        self.status, self.detail, self.scim_type = status, detail, scim_type


def error_response(status: int, detail: str, scim_type: str | None = None) -> HttpResponse:
    body = {"schemas": [str(Error.__schema__)], "status": str(status), "detail": detail}
    if scim_type:
        body["scimType"] = scim_type
    return HttpResponse(json.dumps(body), status=status, content_type=CONTENT_TYPE)


def as_scim_error(exc: Exception) -> ScimError:
    """A SCIM error for what scim2-models raised while reading a payload or applying a patch."""
    if isinstance(exc, ScimError):
        return exc
    if isinstance(exc, SCIMException):
        error = exc.to_error()
        return ScimError(int(error.status or 400), error.detail or str(exc), error.scim_type)
    if isinstance(exc, ValidationError):
        errors = Error.from_validation_errors(exc)
        first = errors[0] if errors else Error(status=400, scim_type="invalidValue", detail=str(exc))
        detail = "; ".join(e.detail or "" for e in errors) or str(exc)
        return ScimError(int(first.status or 400), detail, first.scim_type or "invalidValue")
    return ScimError(400, str(exc), "invalidValue")


def read_resource(model, payload: Any, context: Context):
    """A User or Group resource read from a peer's payload under POLICY, or a SCIM error."""
    try:
        with POLICY:
            return model.model_validate(payload, scim_ctx=context)
    except Exception as exc:
        raise as_scim_error(exc) from exc


def apply_patch(model, resource, payload: Any):
    """``resource`` with the PatchOp of ``payload`` applied (RFC 7644 §3.5.2), or a SCIM error."""
    try:
        with POLICY:
            PatchOp[model].model_validate(payload, scim_ctx=Context.RESOURCE_PATCH_REQUEST).patch(resource)
    except Exception as exc:
        raise as_scim_error(exc) from exc
    return resource


def json_response(body: dict[str, Any], status: int = 200, location: str | None = None) -> HttpResponse:
    response = HttpResponse(json.dumps(body), status=status, content_type=CONTENT_TYPE)
    if location:
        response["Location"] = location
    return response


def list_response(resources: list[dict[str, Any]], total: int, start_index: int) -> dict[str, Any]:
    return {
        "schemas": [str(ListResponse.__schema__)],
        "totalResults": total,
        "startIndex": start_index,
        "itemsPerPage": len(resources),
        "Resources": resources,
    }


def discovery_resource(obj, location: str) -> dict[str, Any]:
    """A schema, resource type or the configuration as served, with its meta.location."""
    body = obj.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE)
    meta = dict(body.get("meta") or {})
    meta.setdefault("resourceType", type(obj).__name__)
    meta["location"] = location
    body["meta"] = meta
    return body
