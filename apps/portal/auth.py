"""Login rules: accounts come from IT (the admin) or from the single sign-on provider, never from
a public sign-up form; and failed logins are limited on every login page (django-axes, counted in
the shared cache, docs/deploy.md)."""

import ipaddress
import math

from allauth.account.adapter import DefaultAccountAdapter
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from axes.backends import AxesStandaloneBackend
from axes.helpers import get_cool_off
from django.conf import settings
from django.shortcuts import render


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request) -> bool:
        return False

    def get_client_ip(self, request) -> str:
        return client_address(request)


def client_address(request) -> str:
    """The client's address for login limits (allauth's and django-axes' alike): the peer's, or
    behind ``TRUSTED_PROXY_COUNT`` proxies the entry the outermost one appended to
    X-Forwarded-For, so a client cannot choose its own."""
    peer = request.META.get("REMOTE_ADDR", "")
    count = settings.TRUSTED_PROXY_COUNT
    hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    if count and len(hops) >= count:
        try:
            return str(ipaddress.ip_address(hops[-count]))
        except ValueError:
            pass
    return peer


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    """A person the organisation's OpenID Connect provider vouches for gets an account on first
    login; until IT gives them memberships they see only their own (empty) work."""

    def is_open_for_signup(self, request, sociallogin) -> bool:
        return True


class LoginLimitBackend(AxesStandaloneBackend):
    """Refuses a login over HTTP while its (username, client IP) is locked out. A login with no
    request (the test client's ``login``, a shell) is no HTTP attempt, so it is not counted."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


def login_name(request, credentials) -> str | None:
    """The name a login attempt is counted against: the admin's ``username``, or the portal's
    ``login`` (allauth passes it on as ``username`` or ``email``)."""
    credentials = credentials or {}
    name = credentials.get("username") or credentials.get("email")
    if not name and request is not None:
        name = request.POST.get("login") or request.POST.get("username")
    return name.strip().lower() if name else None


def locked_out(request, original_response=None, credentials=None):
    """429 with Retry-After while the lockout lasts."""
    cool_off = get_cool_off(request)
    seconds = math.ceil(cool_off.total_seconds()) if cool_off else None
    response = render(request, "account/locked.html", {"minutes": math.ceil((seconds or 0) / 60)}, status=429)
    if seconds:
        response["Retry-After"] = str(seconds)
    return response
