"""What every portal page needs: the navigation for the person's roles and their unread count."""

from apps.portal import access, my_work


def portal(request) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"nav": access.navigation(user), "unread_count": my_work.unread_count(user)}
