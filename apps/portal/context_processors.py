"""What every portal page needs: the navigation for the person's roles and their unread count."""

from apps.portal import selectors


def portal(request) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"nav": selectors.navigation(user), "unread_count": selectors.unread_count(user)}
