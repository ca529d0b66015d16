#!/usr/bin/env bash
# Upgrade an installation of deploy/install.sh to the release this script comes with (or --source),
# unattended, in the order of docs/operations.md ("Upgrade"): a backup, the engine disabled (by the
# release still installed, once no pass is running), Celery worker, what-if worker and beat
# stopped, the release copied in, the venv rebuilt from scratch, migrate, collectstatic, the units
# reinstalled, web restarted, the others started, the engine enabled, then a smoke: /healthz,
# /readyz?engine=1 (a pass ran on the new release), no migration pending, check --deploy clean.
#   deploy/upgrade.sh [options]                     (as root, from the new release's checkout)
# Options, as for deploy/install.sh: --prefix, --source, --env-file, --state-dir, --systemd-dir,
# --user, --python, --pip-args, --no-systemd (the services run as plain processes: deploy/unitrun.py)
#   --backup-dir DIR   KLIQUE_BACKUP_DIR   STATE_DIR/backups: where deploy/backup.sh writes the dump
#   --no-backup        KLIQUE_NO_BACKUP=1  no dump (you took one, or a base backup with WAL archiving)
set -euo pipefail
# shellcheck source=deploy/install-lib.sh
. "$(dirname "$0")/install-lib.sh"
backup_dir=${KLIQUE_BACKUP_DIR:-}
no_backup=${KLIQUE_NO_BACKUP:-}
while [ $# -gt 0 ]; do
  taken=0
  common_option "$@" || taken=$?
  if [ "$taken" = 0 ]; then
    case "$1" in
      --backup-dir) backup_dir=${2:?}; taken=2 ;;
      --no-backup) no_backup=1; taken=1 ;;
      -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      *) die "unknown option $1 (--help)" ;;
    esac
  fi
  shift "$taken"
done
check_common
backup_dir=${backup_dir:-$state_dir/backups}
{ [ -x "$prefix/.venv/bin/python" ] && [ -r "$env_file" ]; } || die "no installation in $prefix with $env_file (deploy/install.sh)"
before=$(version)
say "upgrading Klique $before in $prefix from $source_dir"

if [ -z "$no_backup" ]; then
  install -d -m 700 "$backup_dir"
  dump=$(DATABASE_URL=$(setting DATABASE_URL) BACKUP_DIR=$backup_dir "$source_dir/deploy/backup.sh")
  say "backup: $dump"
fi
manage engine --disable
services stop klique-celery klique-whatif klique-beat

copy_release
build_venv
manage migrate --no-input -v 0
manage createcachetable
collect_static
install_units
[ -n "$no_systemd" ] || systemctl daemon-reload
services restart klique-web
services start klique-celery klique-whatif klique-beat
manage engine --enable

wait_ready 120 /healthz
wait_ready 120 "/readyz?engine=1"
manage migrate --check -v 0
manage check --deploy --fail-level WARNING >/dev/null
say "Klique $before -> $(version): migrated, engine enabled and passing, check --deploy clean"
