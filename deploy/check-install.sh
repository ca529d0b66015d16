#!/usr/bin/env bash
# The VM install and upgrade, run end to end on this host (docs/deploy.md, "Path 3"): deploy/install.sh
# into a temporary root (prefix, environment file, state folder, systemd folder), with --no-systemd
# --start (the units' own commands run as processes: web, Celery worker, what-if worker, beat),
# the first admin and deploy/estate.example.yaml; then checks that the portal answers /healthz and
# /readyz, that the admin logs in through the admin's form and sees the release, and that the
# estate of the file exists. Then deploy/upgrade.sh to a next release (a copy of this checkout whose
# version is VERSION.post1): the dump, the engine's pause (a disabled window), the new venv and
# release, and the same checks, with every estate row and user kept.
#   deploy/check-install.sh
# CHECK_INSTALL_SERVER (postgres://postgres@127.0.0.1:5432) and CHECK_INSTALL_DB (klique_install_check):
# the database, dropped at the end. CHECK_INSTALL_REDIS (redis://127.0.0.1:6379/13).
# CHECK_INSTALL_PORT (18800): gunicorn's. KLIQUE_PIP_ARGS: passed to pip (e.g. a wheelhouse).
# Every process is stopped and the temporary root removed at the end (CHECK_INSTALL_KEEP: kept).
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$(pwd)
server=${CHECK_INSTALL_SERVER:-postgres://postgres@127.0.0.1:5432}
db=${CHECK_INSTALL_DB:-klique_install_check}
redis=${CHECK_INSTALL_REDIS:-redis://127.0.0.1:6379/13}
port=${CHECK_INSTALL_PORT:-18800}
root=$(mktemp -d)
chmod 755 "$root"
prefix=$root/opt/klique
export KLIQUE_PREFIX=$prefix KLIQUE_ENV_FILE=$root/etc/klique/klique.env KLIQUE_STATE_DIR=$root/var/lib/klique
export KLIQUE_SYSTEMD_DIR=$root/etc/systemd/system KLIQUE_USER
KLIQUE_USER=$(id -un)
started=$(date +%s)
say() { printf '[%3ds] check-install: %s\n' $(($(date +%s) - started)) "$*"; }
fail() { echo "check-install: $*" >&2; exit 1; }
admin() { psql "$server/postgres" -v ON_ERROR_STOP=1 -qc "$1"; }
cleanup() {
  local code=$?
  if [ -d "$KLIQUE_SYSTEMD_DIR" ]; then
    python3 "$checkout/deploy/unitrun.py" stop --run-dir "$KLIQUE_STATE_DIR/run" "$KLIQUE_SYSTEMD_DIR"/klique-*.service || true
  fi
  if [ $code -ne 0 ]; then
    for log in "$KLIQUE_STATE_DIR"/run/*.log; do [ -f "$log" ] && { echo "== $log"; tail -n 30 "$log"; }; done
  fi
  admin "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
  if [ -n "${CHECK_INSTALL_KEEP:-}" ]; then echo "kept: $root"; else rm -rf "$root"; fi
  if [ $code -eq 0 ]; then say "passed"; else say "FAILED"; fi
}
trap cleanup EXIT

admin "DROP DATABASE IF EXISTS $db WITH (FORCE)"
admin "CREATE DATABASE $db"
password=$(python3 -c 'import secrets; print(secrets.token_urlsafe(16))')
printf '%s\n' "$password" >"$root/admin-password"
chmod 600 "$root/admin-password"

deploy/install.sh --no-systemd --start --database-url "$server/$db" --redis-url "$redis" --host 127.0.0.1 \
  --set "WEB_BIND=127.0.0.1:$port" --set WEB_WORKERS=2 --set WEB_THREADS=8 --set CELERY_CONCURRENCY=1 \
  --set ENGINE_PASS_INTERVAL_S=1 \
  --admin-username it --admin-email it@example.org --admin-password-file "$root/admin-password" \
  --estate deploy/estate.example.yaml
say "installed"
for unit in klique-web klique-celery klique-whatif klique-beat; do
  [ -f "$KLIQUE_SYSTEMD_DIR/$unit.service" ] || fail "$unit.service not installed"
  grep -q "^EnvironmentFile=$KLIQUE_ENV_FILE\$" "$KLIQUE_SYSTEMD_DIR/$unit.service" || fail "$unit.service reads another environment file"
done
[ "$(stat -c %a "$KLIQUE_ENV_FILE")" = 640 ] || fail "the environment file is not mode 640"

url=http://127.0.0.1:$port
export CHECK_URL=$url CHECK_PASSWORD=$password
# check VERSION: the portal's probes, a login through the admin's form, the release on its index.
check() {
  curl -fsS "$url/healthz" | grep '"alive"' >/dev/null || fail "/healthz"
  curl -fsS "$url/readyz" >/dev/null || fail "/readyz"
  "$prefix/.venv/bin/python" - "$1" <<'PY'
import os, re, sys
import httpx
url, expected = os.environ["CHECK_URL"], sys.argv[1]
headers = {"Host": "127.0.0.1", "X-Forwarded-Proto": "https"}  # as behind nginx
# The cookies are Secure (production): sent by hand, since this is plain HTTP to gunicorn.
with httpx.Client(base_url=url, headers=headers) as web:
    form = web.get("/admin/login/")
    csrf = form.cookies["csrftoken"]
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    answer = web.post(
        "/admin/login/?next=/admin/",
        data={"csrfmiddlewaretoken": token, "username": "it", "password": os.environ["CHECK_PASSWORD"]},
        headers={"Referer": "https://127.0.0.1/admin/login/", "Cookie": f"csrftoken={csrf}"},
    )
    assert answer.status_code == 302 and answer.headers["location"] == "/admin/", (answer.status_code, answer.text[:300])
    index = web.get("/admin/", headers={"Cookie": f"sessionid={answer.cookies['sessionid']}"})
    assert index.status_code == 200 and "Pools" in index.text, index.status_code
    assert f"release {expected}" in index.text, f"the admin's index does not show release {expected}"
print(f"admin 'it' logged in through the admin's form; the index shows release {expected}")
PY
}
# The estate's rows and the users, as JSON (compared before and after the upgrade).
rows() {
  "$prefix/deploy/manage.sh" shell -v 0 -c "
import json
from apps.accounts.models import Group, Membership, User
from apps.engine.models import DisabledWindow
from apps.policies.models import BudgetWindow, ComputeResource, Profile, ProfilePool, ResourcePolicy
from apps.pools.models import GpuType, Pool
models = [GpuType, Group, Pool, Profile, ProfilePool, ResourcePolicy, BudgetWindow, ComputeResource, User, Membership]
def fields(m): return [f.attname for f in m._meta.concrete_fields if f.attname != 'last_login']
rows = {m.__name__: [str(r) for r in m.objects.order_by('pk').values_list(*fields(m))] for m in models}
print(json.dumps({'rows': rows, 'disabled_windows': DisabledWindow.objects.count()}))" | tail -1
}

version=$(cd "$prefix" && .venv/bin/python -c "from klique.version import VERSION; print(VERSION)")
check "$version"
"$prefix/.venv/bin/python" - "$(rows)" <<'PY'
import json, sys
rows = json.loads(sys.argv[1])["rows"]
import yaml
estate = yaml.safe_load(open("deploy/estate.example.yaml"))
for section, model in [("gpu_types", "GpuType"), ("groups", "Group"), ("pools", "Pool"), ("profiles", "Profile"), ("policies", "ResourcePolicy")]:
    assert len(rows[model]) == len(estate[section]), (section, len(rows[model]), len(estate[section]))
for pool in estate["pools"]:
    assert any(f"'{pool['name']}'" in row for row in rows["Pool"]), pool["name"]
assert len(rows["ComputeResource"]) == sum(len(p.get("compute_resources", [])) for p in estate["policies"])
print(f"the estate of deploy/estate.example.yaml exists: {', '.join(f'{len(v)} {k}' for k, v in rows.items())}")
PY
before=$(rows)

# The next release: this checkout, its version with .post1.
next=$root/next
mkdir "$next"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  tar --null -T - -cf - | tar -C "$next" -xf -
sed -i "0,/^version = \"$version\"/s//version = \"$version.post1\"/" "$next/pyproject.toml"
grep -q "^version = \"$version.post1\"" "$next/pyproject.toml" || fail "could not make the next release's version"
"$next/deploy/upgrade.sh" --no-systemd
say "upgraded"
check "$version.post1"
ls "$KLIQUE_STATE_DIR"/backups/klique-*.dump >/dev/null || fail "upgrade.sh wrote no backup"
"$prefix/.venv/bin/python" - "$before" "$(rows)" <<'PY'
import json, sys
before, after = (json.loads(arg) for arg in sys.argv[1:])
assert before["rows"] == after["rows"], {k for k in before["rows"] if before["rows"][k] != after["rows"].get(k)}
assert after["disabled_windows"] == before["disabled_windows"] + 1, "the upgrade did not pause the engine once"
print(f"upgrade kept every row: {sum(map(len, after['rows'].values()))} rows of the estate and its users; "
      "the engine was paused once (one disabled window)")
PY
