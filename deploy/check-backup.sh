#!/usr/bin/env bash
# Backup and restore, tested for real (docs/operations.md): on a scratch PostgreSQL database, build
# the demo estate with a day of usage on the ledger, read the ledger's figures (GPU-hours, budget
# hours and cost from the report service, per group and per pool) and every table's row count,
# dump it with deploy/backup.sh, drop the database, create it empty, restore with
# deploy/restore.sh, and read them again: they must be equal, and no migration may be pending.
#   deploy/check-backup.sh
# CHECK_BACKUP_SERVER (postgres://postgres@127.0.0.1:5432) and CHECK_BACKUP_DB (klique_backup_check)
# say where; the database is dropped at the end. PYTHON: the interpreter with Klique (.venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
server=${CHECK_BACKUP_SERVER:-postgres://postgres@127.0.0.1:5432}
db=${CHECK_BACKUP_DB:-klique_backup_check}
python=${PYTHON:-.venv/bin/python}
work=$(mktemp -d)
admin() { psql "$server/postgres" -v ON_ERROR_STOP=1 -qc "$1"; }
cleanup() { admin "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true; rm -rf "$work"; }
trap cleanup EXIT

admin "DROP DATABASE IF EXISTS $db WITH (FORCE)"
admin "CREATE DATABASE $db"
export DATABASE_URL="$server/$db" DJANGO_SETTINGS_MODULE=klique.settings.base LOG_LEVEL=WARNING
unset REDIS_URL
# the figures are read at the top of the hour, both times
CHECK_BACKUP_AT=$(date -u +%Y-%m-%dT%H:00:00+00:00)
export CHECK_BACKUP_AT
figures() { CHECK_BACKUP_STEP=sums "$python" manage.py shell -v 0 <deploy/check_backup.py | tail -1; }

"$python" manage.py migrate --no-input -v 0
CHECK_BACKUP_STEP=build "$python" manage.py shell -v 0 <deploy/check_backup.py
figures >"$work/before.json"

deploy/backup.sh "$work/klique.dump" >/dev/null
echo "dump: $(du -h "$work/klique.dump" | cut -f1)"
admin "DROP DATABASE $db WITH (FORCE)"
admin "CREATE DATABASE $db"
deploy/restore.sh "$work/klique.dump"
"$python" manage.py migrate --check -v 0
figures >"$work/after.json"

"$python" - "$work/before.json" "$work/after.json" <<'PY'
import json, sys
before, after = (json.load(open(path)) for path in sys.argv[1:])
gpu, budget, cost = before["by_group"]["total"]
print(f"ledger before: {gpu} GPU-hours, {budget} budget hours, cost {cost}; {before['intervals']} "
      f"usage intervals; {sum(before['rows'].values())} rows in {len(before['rows'])} tables")
if before != after:
    for key in before:
        if before[key] != after.get(key):
            print(f"DIFFERS after the restore: {key}: {before[key]} != {after.get(key)}")
    sys.exit(1)
if float(gpu) <= 0 or float(cost) <= 0 or before["intervals"] == 0:
    sys.exit("the estate has no usage to compare")
print("after the restore: the same ledger sums, per group and per pool, and the same row counts")
PY
