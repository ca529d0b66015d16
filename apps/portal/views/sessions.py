"""Sessions in the portal beside **My work**: their owner shares one (who else may open it through
the session gateway), and a session's path on the portal sends the browser on to the gateway when
the gateway has an origin of its own (``make run``: the portal on :8000, the gateway on :8001;
behind the production proxy both share one and ``/sessions/`` never reaches Django)
(docs/sessions.md)."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.accounts.models import User
from apps.sessions import services as sessions
from apps.sessions.selectors import owned_session


@login_required
@require_POST
def share(request, pk: int):
    session = owned_session(request.user, pk)
    if session is None:
        raise Http404("No session of yours has that id.")
    names = sorted(set(request.POST.get("users", "").replace(",", " ").split()))
    users = list(User.objects.filter(username__in=names, is_active=True))
    unknown = sorted(set(names) - {user.username for user in users})
    if unknown:
        messages.error(request, f"Session {pk} is shared as before: no one is called {', '.join(unknown)}.")
    else:
        sessions.share(session, users, by=request.user)
        shared = ", ".join(sorted(user.username for user in users if user != request.user)) or "no one"
        messages.success(request, f"Session {pk} is now shared with {shared}.")
    return redirect(reverse("portal:work") + "#sessions")


@login_required
def open_session(request, pk: int, rest: str = ""):
    """After the gateway sent an anonymous browser to log in, the login's ``next`` lands here."""
    if not settings.SESSION_GATEWAY_URL:
        raise Http404("Sessions are not opened through a gateway here.")
    query = f"?{request.META['QUERY_STRING']}" if request.META.get("QUERY_STRING") else ""
    return HttpResponseRedirect(f"{settings.SESSION_GATEWAY_URL}/sessions/{pk}/{rest}{query}")
