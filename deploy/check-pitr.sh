#!/usr/bin/env bash
# Point-in-time recovery, tested once for real (docs/operations.md, "Point-in-time recovery"): a
# throwaway PostgreSQL cluster in a temporary folder with WAL archiving on (archive_mode,
# archive_command copying each segment to an archive folder), a base backup with pg_basebackup,
# rows written, the time noted, more rows written, then the base backup recovered into a second
# cluster up to that time (restore_command, recovery_target_time): only the first rows may exist.
#   deploy/check-pitr.sh
# PG_BIN: PostgreSQL's programs (initdb, pg_ctl, pg_basebackup; the newest /usr/lib/postgresql/*/bin).
# PITR_PORT (55432): the first cluster's port, the recovered one's +1, on 127.0.0.1. As root, the
# clusters run as the postgres user (initdb refuses root). Both are stopped and removed at the end.
set -euo pipefail
pg_bin=${PG_BIN:-$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -1)}
[ -x "$pg_bin/initdb" ] || { echo "check-pitr.sh: no initdb in '$pg_bin' (set PG_BIN)" >&2; exit 2; }
port=${PITR_PORT:-55432}
work=$(mktemp -d)
as_pg=()
if [ "$(id -u)" = 0 ]; then
  chown postgres: "$work"
  as_pg=(runuser -u postgres --)
fi
pg() { "${as_pg[@]}" "$@"; }
sql() { pg "$pg_bin/psql" -h 127.0.0.1 -p "$1" -U postgres -d postgres -v ON_ERROR_STOP=1 -qAtc "$2"; }
cleanup() {
  local code=$?
  for cluster in primary recovered; do
    [ -f "$work/$cluster/postmaster.pid" ] && pg "$pg_bin/pg_ctl" -D "$work/$cluster" -m immediate stop >/dev/null 2>&1
  done
  if [ $code -ne 0 ]; then
    for log in "$work"/*.log; do [ -f "$log" ] && { echo "== $log"; tail -n 20 "$log"; }; done
  fi
  rm -rf "$work"
  exit $code
}
trap cleanup EXIT

pg mkdir "$work/archive"
pg "$pg_bin/initdb" -D "$work/primary" -U postgres -A trust >/dev/null
pg tee -a "$work/primary/postgresql.conf" >/dev/null <<EOF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$work'
wal_level = replica
archive_mode = on
archive_command = 'test ! -f $work/archive/%f && cp %p $work/archive/%f'
EOF
pg "$pg_bin/pg_ctl" -D "$work/primary" -l "$work/primary.log" -w start >/dev/null
sql "$port" "CREATE TABLE ledger (id int PRIMARY KEY, note text, at timestamptz DEFAULT clock_timestamp())"
pg "$pg_bin/pg_basebackup" -h 127.0.0.1 -p "$port" -U postgres -D "$work/base" --checkpoint=fast --wal-method=stream
echo "base backup taken: $(du -sh "$work/base" | cut -f1)"

sql "$port" "INSERT INTO ledger (id, note) SELECT g, 'before' FROM generate_series(1, 100) g"
sleep 1
target=$(sql "$port" "SELECT clock_timestamp()")
sleep 1
sql "$port" "INSERT INTO ledger (id, note) SELECT g, 'after' FROM generate_series(101, 150) g"
# Close the WAL segment holding the rows, so that it is archived now rather than when full.
segment=$(sql "$port" "SELECT pg_walfile_name(pg_switch_wal())")
for _ in $(seq 1 300); do [ -f "$work/archive/$segment" ] && break; sleep 0.2; done
[ -f "$work/archive/$segment" ] || { echo "check-pitr.sh: $segment was not archived" >&2; exit 1; }
echo "rows 1-100 written, then the time $target, then rows 101-150; $(find "$work/archive" -type f | wc -l) WAL files archived"
pg "$pg_bin/pg_ctl" -D "$work/primary" -m fast stop >/dev/null  # the primary is lost

pg cp -a "$work/base" "$work/recovered"
pg tee -a "$work/recovered/postgresql.conf" >/dev/null <<EOF
port = $((port + 1))
archive_mode = off
restore_command = 'cp $work/archive/%f %p'
recovery_target_time = '$target'
recovery_target_action = 'promote'
EOF
pg touch "$work/recovered/recovery.signal"
pg "$pg_bin/pg_ctl" -D "$work/recovered" -l "$work/recovered.log" -w -t 120 start >/dev/null
for _ in $(seq 1 300); do
  [ "$(sql $((port + 1)) "SELECT pg_is_in_recovery()")" = f ] && break
  sleep 0.2
done
[ "$(sql $((port + 1)) "SELECT pg_is_in_recovery()")" = f ] || { echo "check-pitr.sh: recovery did not end" >&2; exit 1; }
grep -q "recovery stopping before commit" "$work/recovered.log" ||
  { echo "check-pitr.sh: recovery did not stop at the target time" >&2; exit 1; }
found=$(sql $((port + 1)) "SELECT count(*) FILTER (WHERE note = 'before') || ' ' || count(*) FILTER (WHERE note = 'after') FROM ledger")
echo "recovered to $target: ${found% *} rows from before it, ${found#* } from after it"
[ "$found" = "100 0" ] || { echo "check-pitr.sh: expected 100 rows from before and none from after" >&2; exit 1; }
echo "point-in-time recovery: only the rows written before the target time exist"
