"""WSGI entry point (gunicorn ``klique.wsgi:application``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "klique.settings.base")
application = get_wsgi_application()
