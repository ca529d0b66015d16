"""Portal pages of a person's account: personal API tokens."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from apps.accounts import selectors, services
from apps.accounts.forms import ApiTokenForm
from apps.core import throttles


@never_cache
@login_required
def tokens(request):
    """List, create (the token is shown once, on this response only) and revoke tokens."""
    form, raw = ApiTokenForm(), None
    if request.method == "POST" and (refused := throttles.refused(request, "token")):
        return refused
    if request.method == "POST":
        form = ApiTokenForm(request.POST)
        if form.is_valid():
            try:
                _, raw = services.create_api_token(
                    user=request.user, name=form.cleaned_data["name"], expires_at=form.expires_at()
                )
            except ValidationError as error:
                form.add_error(None, error.messages)
            else:
                form = ApiTokenForm()
    context = {
        "form": form,
        "raw": raw,
        "tokens": selectors.api_tokens(request.user),
        "server": request.build_absolute_uri("/"),
    }
    return render(request, "accounts/tokens.html", context, status=201 if raw else 200)


@login_required
@require_POST
def revoke_token(request, pk: int):
    token = get_object_or_404(selectors.api_tokens(request.user), pk=pk)
    services.revoke_api_token(token)
    messages.success(request, f"Token {token.name} ({token.prefix}…) is revoked.")
    return redirect("accounts:tokens")
