#!/usr/bin/env bash
# Back up Klique's PostgreSQL database (docs/operations.md, "Backup and restore").
#   deploy/backup.sh [FILE]      FILE defaults to $BACKUP_DIR/klique-<UTC time>.dump (BACKUP_DIR: .)
# Reads DATABASE_URL (postgres://user[:password]@host:port/name, as the control plane does). Writes
# pg_dump's custom format (-Fc: compressed, restored with pg_restore, tables in any order), first
# to FILE.partial, then checks that pg_restore can read its table of contents, then renames it:
# a FILE that exists is a whole dump. The database stays online: pg_dump reads one consistent
# snapshot while the web, Celery and the engine keep writing.
# The dump holds every password hash and token digest: readable by its owner only (0600).
set -euo pipefail
umask 077
: "${DATABASE_URL:?set DATABASE_URL to the database to back up}"
case "$DATABASE_URL" in
  postgres://* | postgresql://*) ;;
  *) echo "backup.sh: DATABASE_URL is not a PostgreSQL URL" >&2; exit 2 ;;
esac
file=${1:-${BACKUP_DIR:-.}/klique-$(date -u +%Y%m%dT%H%M%SZ).dump}
pg_dump --format=custom --compress=6 --file="$file.partial" --dbname="$DATABASE_URL"
pg_restore --list "$file.partial" >/dev/null
mv "$file.partial" "$file"
echo "$file"
