#!/usr/bin/env bash
# Production smoke on this host (docs/operations.md, "Production smoke"): Klique under
# klique.settings.production with JSON logs, on a scratch PostgreSQL database and a Redis database,
# behind the VM nginx site of deploy/nginx (TLS, a certificate made for 127.0.0.1):
#   migrate, collectstatic, gunicorn (klique/gunicorn_conf.py), nginx serving /static/ itself,
#   a login through the portal's form (CSRF token and cookie), Celery worker and beat running the
#   engine (/readyz?engine=1), and a klique-worker daemon (process mode) that enrols through nginx
#   and runs a task submitted through the API until it has succeeded; /metrics counts the placement.
#   deploy/smoke.sh
# SMOKE_DB_SERVER (postgres://postgres@127.0.0.1:5432) and SMOKE_DB (klique_smoke): the scratch
# database, dropped at the end. REDIS_URL (redis://127.0.0.1:6379/15): broker and cache.
# SMOKE_PORT (18700): gunicorn on it, nginx on +1 (HTTP) and +2 (HTTPS). PYTHON: .venv/bin/python.
# Every process it starts is stopped at the end; their logs are in SMOKE_KEEP (if set) or dropped.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
bin=$(dirname "$python")
server=${SMOKE_DB_SERVER:-postgres://postgres@127.0.0.1:5432}
db=${SMOKE_DB:-klique_smoke}
web_port=${SMOKE_PORT:-18700}
http_port=$((web_port + 1))
tls_port=$((web_port + 2))
base=https://127.0.0.1:$tls_port
work=$(mktemp -d)
chmod 755 "$work"
pids=()
started=$(date +%s)

say() { printf '[%3ds] %s\n' $(($(date +%s) - started)) "$*"; }
admin() { psql "$server/postgres" -v ON_ERROR_STOP=1 -qc "$1"; }
cleanup() {
  local code=$?
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ $code -ne 0 ]; then
    for log in "$work"/*.log; do [ -f "$log" ] && { echo "== $log"; tail -n 25 "$log"; }; done
  fi
  [ -n "${SMOKE_KEEP:-}" ] && mkdir -p "$SMOKE_KEEP" && cp "$work"/*.log "$SMOKE_KEEP"/ 2>/dev/null
  admin "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
  rm -rf "$work"
  if [ $code -eq 0 ]; then say "smoke passed"; else say "smoke FAILED"; fi
}
trap cleanup EXIT
fail() { echo "smoke: $*" >&2; exit 1; }
curl_tls() { curl -sS --cacert "$work/tls.crt" "$@"; }
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: a bound on a loaded machine
  local limit=$1 what=$2
  shift 2
  for _ in $(seq 1 $((limit * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  fail "$what not within ${limit} s"
}

if [ ! -f deploy/nginx/klique.conf ] || [ ! -f deploy/nginx/klique-locations.conf ]; then
  fail "deploy/nginx/klique.conf or klique-locations.conf is missing"
fi

export DJANGO_SETTINGS_MODULE=klique.settings.production
export DATABASE_URL="$server/$db" REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/15}
SECRET_KEY=$("$python" -c 'import secrets; print(secrets.token_urlsafe(50))')
export SECRET_KEY
export ALLOWED_HOSTS=127.0.0.1 TRUSTED_PROXY_COUNT=1 STATIC_ROOT="$work/static"
METRICS_TOKEN=$("$python" -c 'import secrets; print(secrets.token_hex(16))')
export METRICS_TOKEN
export ENGINE_PASS_INTERVAL_S=1 LOG_LEVEL=INFO
unset LOG_FORMAT DEBUG

say "scratch database $db, Redis $REDIS_URL"
admin "DROP DATABASE IF EXISTS $db WITH (FORCE)"
admin "CREATE DATABASE $db"
"$python" manage.py migrate --no-input -v 0
"$python" manage.py collectstatic --no-input -v 0
"$python" manage.py check --deploy --fail-level WARNING >/dev/null
say "migrated, static collected, check --deploy clean"

openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
  -keyout "$work/tls.key" -out "$work/tls.crt" 2>/dev/null
# The VM site as shipped, with this run's ports, certificate, static folder and log files.
sed -e "s#/opt/klique/staticfiles/#$work/static/#" deploy/nginx/klique-locations.conf >"$work/klique-locations.conf"
sed -e "s#server 127.0.0.1:8000#server 127.0.0.1:$web_port#" \
  -e "s#listen 80;#listen 127.0.0.1:$http_port;#" -e "s#listen 443 ssl#listen 127.0.0.1:$tls_port ssl#" \
  -e "/listen \[::\]/d" -e "s#server_name klique.example.org;#server_name 127.0.0.1;#" \
  -e "s#/etc/ssl/klique/tls.crt#$work/tls.crt#" -e "s#/etc/ssl/klique/tls.key#$work/tls.key#" \
  -e "s#/var/log/nginx/klique.access.log#$work/nginx-access.log#" \
  -e "s#/var/log/nginx/klique.error.log#$work/nginx-error.log#" \
  -e "s#/etc/nginx/snippets/klique-locations.conf#$work/klique-locations.conf#" \
  -e "s#root /var/www/html;#root $work/acme;#" \
  deploy/nginx/klique.conf >"$work/site.conf"
{
  [ "$(id -u)" = 0 ] && echo "user root;"
  cat <<EOF
daemon off;
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 256; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    client_body_temp_path $work/nginx-body;
    proxy_temp_path $work/nginx-proxy;
    fastcgi_temp_path $work/nginx-fastcgi;
    uwsgi_temp_path $work/nginx-uwsgi;
    scgi_temp_path $work/nginx-scgi;
    include $work/site.conf;
}
EOF
} >"$work/nginx.conf"
grep -q "ssl_certificate $work/tls.crt;" "$work/site.conf" || fail "could not point the site at this run's certificate"
nginx -t -c "$work/nginx.conf" -p "$work" 2>"$work/nginx-t.log" || { cat "$work/nginx-t.log"; fail "nginx -t"; }

"$python" -m gunicorn --config python:klique.gunicorn_conf klique.wsgi:application --bind "127.0.0.1:$web_port" \
  --workers 2 --worker-class gthread --threads 8 --timeout 60 >"$work/web-access.log" 2>"$work/web.log" &
pids+=($!)
nginx -c "$work/nginx.conf" -p "$work" >"$work/nginx.log" 2>&1 &
pids+=($!)
"$bin/celery" -A klique worker -Q engine,meter,sweep,autoscale,celery --concurrency 2 --loglevel INFO \
  --hostname "smoke@%h" >"$work/celery-worker.log" 2>&1 &
pids+=($!)
"$bin/celery" -A klique beat --loglevel INFO --schedule "$work/beat-schedule" >"$work/celery-beat.log" 2>&1 &
pids+=($!)
wait_for 120 "gunicorn behind nginx" curl_tls -f "$base/healthz"
say "gunicorn, nginx, Celery worker and beat started"

# Static files come from nginx's disk, never from gunicorn.
css=$(curl_tls -f "$base/accounts/login/" | grep -o '/static/[^"]*\.[0-9a-f]\{12\}\.css' | head -1)
[ -n "$css" ] || fail "the login page links no hashed stylesheet"
headers=$(curl_tls -f -D - -o /dev/null -H 'Accept-Encoding: gzip' "$base$css")
grep -qi '^server: nginx' <<<"$headers" || fail "$css not answered by nginx"
grep -qi 'cache-control: public, max-age=315360000, immutable' <<<"$headers" || fail "$css not cached for a year"
curl_tls -f "$base$css" | cmp -s - "$work/static${css#/static}" || fail "$css differs from the collected file"
! grep -qF "$css" "$work/web-access.log" || fail "$css reached gunicorn"  # the site does not log /static/
curl_tls -sf -o /dev/null "http://127.0.0.1:$http_port/" -w '%{http_code}' | grep -q 301 || fail "plain HTTP not redirected"
say "static $css served by nginx (cached a year), plain HTTP redirected"

# The estate, a login through the portal's form, and the engine's passes.
SMOKE_PASSWORD=$("$python" -c 'import secrets; print(secrets.token_urlsafe(16))')
export SMOKE_PASSWORD
estate=$("$python" manage.py shell -v 0 <deploy/smoke_estate.py | tail -1)
field() { "$python" -c "import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$estate" "$1"; }
jar=$work/cookies
token=$(curl_tls -f -c "$jar" -b "$jar" "$base/accounts/login/" | grep -o 'name="csrfmiddlewaretoken" value="[^"]*"' |
  sed 's/.*value="//; s/"$//')
[ -n "$token" ] || fail "no CSRF token on the login form"
answer=$(curl_tls -c "$jar" -b "$jar" -o /dev/null -w '%{http_code} %{redirect_url}' \
  -H "Origin: $base" -H "Referer: $base/accounts/login/" --data-urlencode "csrfmiddlewaretoken=$token" \
  --data-urlencode login=smoke --data-urlencode "password=$SMOKE_PASSWORD" "$base/accounts/login/")
[ "${answer%% *}" = 302 ] || fail "login answered $answer"
curl_tls -f -b "$jar" "$base/" | grep 'smoke' >/dev/null || fail "the portal does not show the person logged in"
say "logged in through the portal's form ($answer)"
wait_for 60 "an engine pass (/readyz?engine=1)" curl_tls -f "$base/readyz?engine=1"
say "the engine passes (Celery beat and worker): /readyz?engine=1 answers 200"

# A worker daemon enrols through nginx and runs a task submitted through the API.
KLIQUE_ENROLMENT_TOKEN=$(field enrolment_token) "$bin/klique-worker" --server "$base" --ca-bundle "$work/tls.crt" \
  --gpus 1 --hostname smoke-node --state-dir "$work/worker" --log-format json >"$work/klique-worker.log" 2>&1 &
pids+=($!)
api_token=$(field api_token)
submitted=$(curl_tls -f -H "Authorization: Bearer $api_token" -H 'Content-Type: application/json' \
  -d "{\"compute_resource\": \"$(field resource)\", \"command\": \"echo smoke ran on \$(hostname)\"}" "$base/api/v1/tasks/")
task=$("$python" -c "import json, sys; print(json.loads(sys.argv[1])['id'])" "$submitted")
state() { curl_tls -f -H "Authorization: Bearer $api_token" "$base/api/v1/tasks/$task/" |
  "$python" -c "import json, sys; print(json.load(sys.stdin)['state'])"; }
succeeded() { [ "$(state)" = succeeded ]; }
wait_for 120 "task $task succeeded" succeeded
say "task $task submitted through the API, placed by the engine, run by klique-worker: succeeded"
# grep without -q reads to the end: under pipefail, -q quitting early can fail curl with SIGPIPE.
curl_tls -f -H "Authorization: Bearer $METRICS_TOKEN" "$base/metrics" | grep '^klique_placements_total 1.0$' >/dev/null ||
  fail "/metrics does not count the placement"

# Every process logged JSON lines; the pass and the daemon with their ids.
"$python" - "$work" "$task" <<'PY'
import json, pathlib, sys
work, task = pathlib.Path(sys.argv[1]), int(sys.argv[2])
def lines(name):
    # celery prints its banner as text before logging starts; every log line is JSON
    return [json.loads(t) for t in (work / name).read_text().splitlines() if t.startswith("{")]
access = lines("web-access.log")
assert any(line.get("path") == f"/api/v1/tasks/{task}/" and line.get("status") == 200 for line in access), "access"
assert all(not line["path"].startswith("/static/") for line in access if "path" in line)
celery = lines("celery-worker.log")
placed = [line for line in celery if line["event"] == "task placed" and line["task_id"] == task]
assert placed and placed[0]["pass_id"] and placed[0]["celery_task_id"], "the pass's placement line"
daemon = [line for line in lines("klique-worker.log") if line["logger"] == "klique.worker"]
ended = [line for line in daemon if line["event"] == "ended" and line.get("task_id") == task]
assert ended and ended[0]["exit_code"] == 0 and ended[0]["pool_id"], "the daemon's end line"
counts = {name: len(lines(name)) for name in ("web.log", "web-access.log", "celery-worker.log", "celery-beat.log", "klique-worker.log")}
print("JSON log lines:", ", ".join(f"{name} {n}" for name, n in counts.items()))
PY
say "/metrics counts the placement; web, Celery and the daemon log JSON lines with their ids"
