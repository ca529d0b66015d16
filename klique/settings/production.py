"""Production settings: refuses to start on the development secret key or with DEBUG on."""

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F401,F403
from .base import DEV_SECRET_KEY, SECRET_KEY, env_bool, env_list

if SECRET_KEY == DEV_SECRET_KEY or len(SECRET_KEY) < 32:
    raise ImproperlyConfigured("SECRET_KEY must be set to a random value of at least 32 characters.")

DEBUG = env_bool("DEBUG", False)
if DEBUG:
    raise ImproperlyConfigured("DEBUG must be off in production.")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [])
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS must name the hosts the control plane answers for.")

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
