"""The owner of a session shares it from **My work**: who else may open it through the session
gateway (docs/sessions.md)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
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
