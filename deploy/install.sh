#!/usr/bin/env bash
# Install Klique's control plane on a Debian VM (docs/deploy.md, "Path 3"), unattended and safe to
# run again: the release into the prefix, a venv with the server extra, the environment file
# (written once: the secret key and metrics token are generated), migrate, collectstatic, the first
# IT admin and the estate (manage.py bootstrap), and the systemd units, enabled and started.
#   deploy/install.sh --database-url URL --host NAME [options]          (as root)
# Options (each also an environment variable):
#   --prefix DIR           KLIQUE_PREFIX        /opt/klique: the release and its venv (.venv)
#   --source DIR           KLIQUE_SOURCE        the release to install (this script's checkout)
#   --env-file FILE        KLIQUE_ENV_FILE      /etc/klique/klique.env (kept when it exists)
#   --state-dir DIR        KLIQUE_STATE_DIR     /var/lib/klique (beat's schedule; backups)
#   --systemd-dir DIR      KLIQUE_SYSTEMD_DIR   /etc/systemd/system
#   --user NAME            KLIQUE_USER          klique (created as a system user when missing)
#   --database-url URL     DATABASE_URL         PostgreSQL; the database must exist
#   --redis-url URL        REDIS_URL            redis://127.0.0.1:6379/0
#   --host NAME            KLIQUE_HOST          the public host name (ALLOWED_HOSTS, CSRF, public URL)
#   --set KEY=VALUE        (repeatable)         a further line of a new environment file
#   --admin-username NAME, --admin-email ADDRESS, --admin-password-file FILE, --admin-group SLUG
#                          KLIQUE_ADMIN_USERNAME, _EMAIL, _PASSWORD_FILE, _GROUP: the first IT admin
#   --estate FILE          KLIQUE_ESTATE        the estate's YAML (deploy/estate.example.yaml)
#   --python PATH          PYTHON               python3
#   --pip-args WORDS       KLIQUE_PIP_ARGS      e.g. "--no-index --find-links /srv/wheels"
#   --no-systemd           KLIQUE_INSTALL_NO_SYSTEMD=1: install the units, do not enable them
#   --start                KLIQUE_INSTALL_START=1: with --no-systemd, start the units' commands as
#                          plain processes (deploy/unitrun.py) and wait for /readyz
set -euo pipefail
# shellcheck source=deploy/install-lib.sh
. "$(dirname "$0")/install-lib.sh"
database_url=${DATABASE_URL:-}
redis_url=${REDIS_URL:-redis://127.0.0.1:6379/0}
host=${KLIQUE_HOST:-}
admin_username=${KLIQUE_ADMIN_USERNAME:-}
admin_email=${KLIQUE_ADMIN_EMAIL:-}
admin_password_file=${KLIQUE_ADMIN_PASSWORD_FILE:-}
admin_group=${KLIQUE_ADMIN_GROUP:-}
estate=${KLIQUE_ESTATE:-}
start=${KLIQUE_INSTALL_START:-}
extra=()

while [ $# -gt 0 ]; do
  taken=0
  common_option "$@" || taken=$?
  if [ "$taken" = 0 ]; then
    case "$1" in
      --database-url) database_url=${2:?}; taken=2 ;;
      --redis-url) redis_url=${2:?}; taken=2 ;;
      --host) host=${2:?}; taken=2 ;;
      --set) extra+=("${2:?}"); taken=2 ;;
      --admin-username) admin_username=${2:?}; taken=2 ;;
      --admin-email) admin_email=${2:?}; taken=2 ;;
      --admin-password-file) admin_password_file=${2:?}; taken=2 ;;
      --admin-group) admin_group=${2:?}; taken=2 ;;
      --estate) estate=$(realpath "${2:?}"); taken=2 ;;
      --start) start=1; taken=1 ;;
      -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      *) die "unknown option $1 (--help)" ;;
    esac
  fi
  shift "$taken"
done
check_common
[ -z "$start" ] || [ -n "$no_systemd" ] || die "--start is for --no-systemd (systemd starts the enabled units)"
if [ ! -f "$env_file" ]; then
  [ -n "$database_url" ] || die "--database-url (or DATABASE_URL) is needed to write $env_file"
  [ -n "$host" ] || die "--host (or KLIQUE_HOST) is needed to write $env_file"
fi

if ! id "$user" >/dev/null 2>&1; then
  useradd --system --home-dir "$state_dir" --shell /usr/sbin/nologin "$user"
  group=$(id -gn "$user")
  say "system user $user created"
fi
copy_release
build_venv
install -d -m 750 -o "$user" -g "$group" "$state_dir"

if [ -f "$env_file" ]; then
  say "environment file $env_file kept as it is"
else
  install -d -m 750 -g "$group" "$(dirname "$env_file")"
  token() { "$python" -c 'import secrets, sys; print(secrets.token_urlsafe(int(sys.argv[1])))' "$1"; }
  (
    umask 027
    cat >"$env_file" <<EOF
# Klique's settings (docs/deploy.md, "Settings"), read by the units as EnvironmentFile=: KEY=VALUE
# lines, no expansion. Written by deploy/install.sh; an install or upgrade keeps it as it is.
SECRET_KEY=$(token 50)
DATABASE_URL=$database_url
REDIS_URL=$redis_url
ALLOWED_HOSTS=$host
CSRF_TRUSTED_ORIGINS=https://$host
KLIQUE_PUBLIC_URL=https://$host
TRUSTED_PROXY_COUNT=1
METRICS_TOKEN=$(token 32)
STATIC_ROOT=$prefix/staticfiles
EOF
    for line in "${extra[@]}"; do printf '%s\n' "$line"; done >>"$env_file"
  )
  chgrp "$group" "$env_file"
  say "environment file $env_file written (mode 640, group $group; a new SECRET_KEY and METRICS_TOKEN)"
fi

manage migrate --no-input -v 0
manage createcachetable
manage check --deploy --fail-level WARNING >/dev/null
say "database migrated, check --deploy clean"
collect_static

if [ -n "$estate" ] || [ -n "$admin_username" ]; then
  args=()
  if [ -n "$estate" ]; then  # a copy the service user can read: STATE_DIR/estate.yaml
    install -m 640 -o "$user" -g "$group" "$estate" "$state_dir/estate.yaml"
    args+=(--from "$state_dir/estate.yaml")
  fi
  [ -n "$admin_username" ] && args+=(--admin-username "$admin_username" --admin-email "$admin_email")
  [ -n "$admin_password_file" ] && args+=(--admin-password-file -)  # root reads it, not the service user
  [ -n "$admin_group" ] && args+=(--admin-group "$admin_group")
  if [ -n "$admin_password_file" ]; then
    manage bootstrap "${args[@]}" <"$admin_password_file"
  else
    manage bootstrap "${args[@]}" </dev/null
  fi
fi

install_units
if [ -z "$no_systemd" ]; then
  systemctl daemon-reload
  systemctl enable --now "${units[@]}"
  say "units enabled and started"
elif [ -n "$start" ]; then
  services start "${units[@]}"
else
  say "units not enabled (--no-systemd): systemctl daemon-reload && systemctl enable --now ${units[*]}"
fi
if [ -z "$no_systemd" ] || [ -n "$start" ]; then
  wait_ready 120 /readyz
fi
say "Klique $(version) installed in $prefix; next: the nginx site and its certificate (docs/deploy.md, Path 3)"
