#!/usr/bin/env bash
# manage.py of an installed Klique (deploy/install.sh), as systemd would run it: production settings,
# the environment file read as EnvironmentFile= reads it (deploy/with_env.py), the install's user.
#   /opt/klique/deploy/manage.sh ARGS...       e.g. manage.sh engine --disable, manage.sh createsuperuser
# KLIQUE_ENV_FILE (/etc/klique/klique.env) and KLIQUE_USER (klique; as root, it runs as that user).
set -euo pipefail
prefix=$(cd "$(dirname "$0")/.." && pwd)
env_file=${KLIQUE_ENV_FILE:-/etc/klique/klique.env}
user=${KLIQUE_USER:-klique}
[ -r "$env_file" ] || { echo "manage.sh: cannot read $env_file (KLIQUE_ENV_FILE)" >&2; exit 2; }
as_user=()
if [ "$(id -u)" = 0 ] && [ "$user" != root ]; then as_user=(runuser -u "$user" --); fi
cd "$prefix"
exec "${as_user[@]}" env -i PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
  DJANGO_SETTINGS_MODULE=klique.settings.production PYTHONPATH="$prefix" \
  python3 "$prefix/deploy/with_env.py" "$env_file" "$prefix/.venv/bin/python" manage.py "$@"
