#!/usr/bin/env bash
# Stop the Keycloak of start.sh: the process group (kc.sh and its java) led by the PID in its pid
# file; with --wipe also delete its directory (the H2 database: the next start imports
# klique-realm.json afresh).
#
#   deploy/dev-services/keycloak/stop.sh [--wipe]
set -uo pipefail

dir=$(realpath -m "${KEYCLOAK_DIR:-/tmp/klique-keycloak}")
running() { ps -o stat= -p "$1" 2>/dev/null | grep -qv Z; }  # a zombie has stopped
if [ -f "$dir/keycloak.pid" ]; then
  pid=$(cat "$dir/keycloak.pid")
  kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do running "$pid" || break; sleep 0.5; done
  if running "$pid"; then kill -9 -- "-$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null; fi
  rm -f "$dir/keycloak.pid"
fi
if [ "${1:-}" = "--wipe" ]; then
  rm -rf "$dir"
fi
echo "keycloak: stopped"
