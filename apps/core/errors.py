"""The API's own answers for errors Django raises before a view runs, in the API's error shape
(``{"detail": ...}``); the portal keeps Django's pages. Set as ``handler400`` and ``handler404`` in
klique/urls.py:

- 404 for an address under ``/api/`` that matches no route (``/api/v1/tasks/0.5/``);
- 400 for a request Django refuses as suspicious, such as a body above
  ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (``RequestDataTooBig``)."""

from django.http import JsonResponse
from django.views.defaults import bad_request as django_bad_request
from django.views.defaults import page_not_found


def not_found(request, exception=None):
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return page_not_found(request, exception)


def bad_request(request, exception=None):
    if request.path.startswith("/api/"):
        reason = str(exception) if exception else "Bad request."
        return JsonResponse({"detail": reason}, status=400)
    return django_bad_request(request, exception)


def refusal(error):
    """A service's ``ValidationError`` as the API's 400: its fields and reasons, or
    ``non_field_errors`` when it names none. The one owner of that translation."""
    from rest_framework import serializers

    detail = error.message_dict if hasattr(error, "error_dict") else {"non_field_errors": error.messages}
    return serializers.ValidationError(detail)


def form_refusal(form, error, fields: dict | None = None) -> None:
    """A service's ``ValidationError`` on a form: each message under its field when the form has
    it (``fields`` renames a service's field to the form's), else above the form."""
    for field, messages in error.message_dict.items():
        field = (fields or {}).get(field, field)
        form.add_error(field if field in form.fields else None, messages)
