#!/bin/sh
# The image's HEALTHCHECK: the web role is healthy when /readyz answers 200 (apps/core/health.py:
# the database and Redis answer). Celery's roles have no HTTP port; they count as healthy while
# their process runs (Docker restarts it when it exits).
case "$(tr '\0' ' ' </proc/1/cmdline)" in
  *gunicorn*)
    exec python3 -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('PORT', '8000'), timeout=4)"
    ;;
  *) exit 0 ;;
esac
