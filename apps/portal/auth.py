"""Login rules for django-allauth: accounts come from IT (the admin) or from the single sign-on
provider, never from a public sign-up form."""

from allauth.account.adapter import DefaultAccountAdapter
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request) -> bool:
        return False


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    """A person the organisation's OpenID Connect provider vouches for gets an account on first
    login; until IT gives them memberships they see only their own (empty) work."""

    def is_open_for_signup(self, request, sociallogin) -> bool:
        return True
