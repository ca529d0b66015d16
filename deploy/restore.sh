#!/usr/bin/env bash
# Restore a dump of deploy/backup.sh into Klique's PostgreSQL database (docs/operations.md).
#   deploy/restore.sh FILE
# Reads DATABASE_URL. The database must exist and be empty (createdb, or DROP then CREATE DATABASE):
# restore.sh refuses one that holds tables rather than mix two estates. The restore is one
# transaction (all or nothing) and takes no ownership from the dump, so any role that owns the
# new database can restore. Stop web, Celery worker and beat and the worker daemons' control plane
# first; afterwards run `manage.py migrate` (a dump of an older release) and start them again.
set -euo pipefail
: "${DATABASE_URL:?set DATABASE_URL to the (empty) database to restore into}"
file=${1:?usage: restore.sh FILE}
[ -r "$file" ] || { echo "restore.sh: cannot read $file" >&2; exit 2; }
tables=$(psql "$DATABASE_URL" -tAc "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
if [ "$tables" != "0" ]; then
  echo "restore.sh: the database of DATABASE_URL holds $tables tables; restore into an empty one" >&2
  exit 1
fi
pg_restore --no-owner --no-privileges --exit-on-error --single-transaction --dbname="$DATABASE_URL" "$file"
# Fresh planner statistics for the restored tables only: a bare ANALYZE also visits the system
# catalogs, and warns for each one ("only superuser can analyze it") when the role is not superuser.
psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -q <<'SQL'
SELECT format('ANALYZE %I.%I', schemaname, tablename) FROM pg_tables
 WHERE schemaname = 'public' AND tableowner = current_user \gexec
SQL
echo "restored $file"
