#!/bin/sh
# The control plane's roles; anything else runs as given (e.g. `manage.py createsuperuser`).
set -eu
role="${1:-web}"
[ "$#" -gt 0 ] && shift
case "$role" in
  web)
    # gthread: each worker daemon waiting at /api/v1/workers/wait (up to WORKER_WAIT_MAX_S, 20 s)
    # holds one thread; the timeout stays above that wait, and nginx's proxy timeouts match it.
    exec gunicorn --config python:klique.gunicorn_conf klique.wsgi:application --bind "0.0.0.0:${PORT:-8000}" \
      --workers "${WEB_WORKERS:-4}" --worker-class gthread --threads "${WEB_THREADS:-32}" \
      --timeout "${WEB_TIMEOUT:-60}" --graceful-timeout "${WEB_GRACEFUL_TIMEOUT:-30}" \
      --keep-alive "${WEB_KEEPALIVE:-75}" \
      --access-logfile - --error-logfile - "$@"
    ;;
  worker)
    exec celery -A klique worker -Q "${CELERY_QUEUES:-engine,meter,sweep,autoscale,celery}" \
      --concurrency "${CELERY_CONCURRENCY:-2}" --loglevel "${LOG_LEVEL:-INFO}" "$@"
    ;;
  whatif)
    exec celery -A klique worker -Q whatif --concurrency "${CELERY_WHATIF_CONCURRENCY:-1}" \
      --loglevel "${LOG_LEVEL:-INFO}" "$@"
    ;;
  gateway)
    # The session gateway (docs/sessions.md): browsers open sessions, worker daemons keep tunnels.
    exec klique-gateway --listen "0.0.0.0:${GATEWAY_PORT:-8001}" \
      --control-plane "${KLIQUE_INTERNAL_URL:-http://web:8000}" --public-url "${KLIQUE_SESSION_GATEWAY_URL:-}" "$@"
    ;;
  beat)
    exec celery -A klique beat --loglevel "${LOG_LEVEL:-INFO}" \
      --schedule "${CELERY_BEAT_SCHEDULE_FILE:-/var/lib/klique/celerybeat-schedule}" "$@"
    ;;
  migrate)
    python manage.py migrate --no-input "$@"
    # Without Redis the login limits and throttles count in a database table.
    if [ -z "${REDIS_URL:-}" ]; then python manage.py createcachetable; fi
    # compose: hand this image's collected static files to nginx (at every upgrade; old hashed names stay).
    if [ -n "${STATIC_EXPORT_DIR:-}" ]; then
      cp -R "$STATIC_ROOT"/. "$STATIC_EXPORT_DIR"/
    fi
    ;;
  selfsigned-cert)
    exec python /usr/local/bin/selfsigned-cert.py "$@"
    ;;
  manage)
    exec python manage.py "$@"
    ;;
  *)
    exec "$role" "$@"
    ;;
esac
