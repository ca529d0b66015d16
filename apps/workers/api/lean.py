"""``POST /api/v1/workers/sync`` as a plain Django view: the call every daemon makes every poll,
served without DRF's request stack (its request wrapper, content negotiation, authenticator,
permission and throttle classes, exception handler and response), which took about a quarter of
a steady sync's web CPU (docs/benchmarks.md, "Worker sync at 2,000 daemons").

A daemon's usual request is served here: POST, no query string, ``Accept`` absent, ``*/*`` or
``application/json``, a JSON body (``application/json`` without parameters, within
``DATA_UPLOAD_MAX_MEMORY_SIZE``) that parses, a worker token that finds its worker, and within
the ``sync`` throttle. Any other goes to ``SyncView`` (DRF), which answers it as it always has
(405, 406, 415, a parse error, 401 for a bad token, 429): nothing has been counted or written by
then. Past those checks the answer is ``apps.workers.api.sync.answer``'s, in DRF's bytes and
headers: its JSON renderer, ``Allow`` and ``Vary``; a bad envelope is 400 with its paths, a
retired worker 401 with ``WWW-Authenticate``."""

from types import SimpleNamespace

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import AuthenticationFailed, ValidationError
from rest_framework.renderers import JSONRenderer

from apps.core.parsers import loads
from apps.core.throttles import ScopedThrottle
from apps.workers.api.authentication import WorkerTokenAuthentication, worker_of
from apps.workers.api.sync import SyncView, answer

ACCEPTED = ("", "*/*", "application/json")
HEADERS = SyncView().default_response_headers
AUTHENTICATE = WorkerTokenAuthentication().authenticate_header(None)
_renderer = JSONRenderer()
_drf_view = SyncView.as_view()


def _usual_body(request):
    """The parsed body of a daemon's usual request; None for any other."""
    meta = request.META
    if request.method != "POST" or meta.get("QUERY_STRING") or meta.get("HTTP_ACCEPT", "") not in ACCEPTED:
        return None
    if request.content_type != "application/json" or request.content_params:
        return None
    try:
        length = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None
    if not 0 < length <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        return None
    try:
        return loads(request.body.decode(settings.DEFAULT_CHARSET))
    except (ValueError, RecursionError):
        return None


def _json(data, status: int = 200) -> HttpResponse:
    response = HttpResponse(_renderer.render(data), content_type="application/json", status=status)
    for key, value in HEADERS.items():
        response[key] = value
    return response


@csrf_exempt
def sync(request):
    body = _usual_body(request)
    worker = worker_of(request) if body is not None else None
    throttle = ScopedThrottle()
    if worker is None or not throttle.allow_request(SimpleNamespace(auth=worker), SyncView):
        return _drf_view(request)
    request.user = AnonymousUser()  # as DRF's authentication leaves it
    try:
        return _json(answer(worker, body))
    except ValidationError as error:
        return _json(error.detail, error.status_code)
    except AuthenticationFailed as error:
        response = _json({"detail": error.detail}, error.status_code)
        response["WWW-Authenticate"] = AUTHENTICATE
        return response


# drf-spectacular describes the URL from the DRF view it names (as ``as_view`` sets these).
sync.cls, sync.initkwargs = SyncView, {}
