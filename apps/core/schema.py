"""The OpenAPI schema documents the errors each operation really answers, with their bodies.

``AutoSchema`` (``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]``) adds to drf-spectacular's operations:

- 400 where the operation reads input: a request body, query parameters or headers;
- 401 where it needs credentials (every operation but the public ones);
- 403 on writes that session authentication protects with CSRF, and where the view says so;
- 404 where the path names an object;
- 415 where it reads a body, which must be JSON;
- 429 where the view throttles;
- any further status a view declares in ``error_statuses`` (``{action or method: (status, ...)}``),
  e.g. 403 for another pool's task, 409 for a lost worker's claim.

Bodies keep DRF's shape: ``{"detail": "..."}``, or for 400 also ``{"<field>": ["<message>", ...]}``
(nested for nested fields, ``non_field_errors`` for the whole body).
"""

from drf_spectacular import openapi
from drf_spectacular.plumbing import ResolvedComponent, force_instance
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication

DESCRIPTIONS = {
    "400": "Invalid input: each field with its reasons, or a `detail` (a body that cannot be parsed).",
    "401": "No credentials, or unknown, revoked or expired ones.",
    "403": "Authenticated, but not allowed to do this (or a CSRF failure for a session).",
    "404": "No such object among those visible to you.",
    "409": "The request conflicts with the current state; `detail` says what to do.",
    "415": "The body is not JSON (`Content-Type: application/json`).",
    "429": "Too many requests; retry after the `Retry-After` seconds.",
}
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
VALIDATION_ERROR_SCHEMA = {
    "type": "object",
    "description": "Each invalid field with a list of reasons (an object for a nested field), "
    "`non_field_errors` for the body as a whole, or `detail` for a body that cannot be parsed.",
    "additionalProperties": {"anyOf": [{"type": "array"}, {"type": "object"}, {"type": "string"}]},
}
# NUL is refused in any text (PostgreSQL cannot store it); a query parameter's schema says so.
WITHOUT_NUL = "^[^\\u0000]*$"
# A required text that DRF trims refuses one that is only whitespace ("may not be blank"): it needs
# a character that is neither whitespace nor NUL.
NOT_BLANK_WITHOUT_NUL = "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$"


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="What went wrong, for a person.")


class AutoSchema(openapi.AutoSchema):
    def get_operation(self, *args, **kwargs):
        operation = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        for parameter in operation.get("parameters", []):
            schema = parameter.get("schema", {})
            if parameter["in"] == "query" and schema.get("type") == "string":
                if not {"pattern", "enum", "format"} & schema.keys():
                    schema["pattern"] = WITHOUT_NUL
        responses = operation.setdefault("responses", {})
        for code in sorted(self._error_statuses(operation)):
            if code not in responses:
                responses[code] = self._error_response(code)
        return operation

    def _get_request_for_media_type(self, serializer, direction="request"):
        schema, required = super()._get_request_for_media_type(serializer, direction)
        # a body that must send one of several fields (``apps.core.fields.ExactlyOneOf``) is required
        return schema, required or bool(getattr(force_instance(serializer), "one_of", ()))

    def _error_statuses(self, operation: dict) -> set[str]:
        parameters = operation.get("parameters", [])
        statuses = set()
        if "requestBody" in operation or any(p["in"] in ("query", "header") for p in parameters):
            statuses.add("400")
        if "requestBody" in operation:
            statuses.add("415")
        if operation.get("security") and {} not in operation["security"]:
            statuses.add("401")
            authenticators = getattr(self.view, "authentication_classes", [])
            if self.method not in SAFE_METHODS and any(
                issubclass(a, SessionAuthentication) for a in authenticators
            ):
                statuses.add("403")
        if any(p["in"] == "path" for p in parameters):
            statuses.add("404")
        if self.view.get_throttles():
            statuses.add("429")
        declared = getattr(self.view, "error_statuses", {})
        key = getattr(self.view, "action", None) or self.method.lower()
        statuses.update(str(code) for code in declared.get(key, ()))
        return statuses

    def _error_response(self, code: str) -> dict:
        if code == "400":
            component = ResolvedComponent(
                name="ValidationError",
                type=ResolvedComponent.SCHEMA,
                object="ValidationError",
                schema=VALIDATION_ERROR_SCHEMA,
            )
            self.registry.register_on_missing(component)
            body = component.ref
        else:
            body = ErrorSerializer
        response = self._get_response_for_code(body, code)
        response["description"] = DESCRIPTIONS.get(code, response.get("description", ""))
        return response
