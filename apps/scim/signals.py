"""What provisioning tells the apps above it. ``user_deactivated`` is sent, inside the
deactivation's transaction, with ``user`` and ``provider`` (the IdentityProvider, or None); the
tasks app tells the team leads of the person's running work (apps/tasks/deactivation.py)."""

from django.dispatch import Signal

user_deactivated = Signal()
