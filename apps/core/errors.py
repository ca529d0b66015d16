"""A JSON 404 for an address under ``/api/`` that matches no route (``/api/v1/tasks/0.5/``), in
the API's error shape; the portal keeps Django's page. Set as ``handler404`` in klique/urls.py."""

from django.http import JsonResponse
from django.views.defaults import page_not_found


def not_found(request, exception=None):
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return page_not_found(request, exception)
