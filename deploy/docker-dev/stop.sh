#!/usr/bin/env bash
# Stop what deploy/docker-dev/start.sh started in DIR: its containers, then the Podman service.
# The image store stays (a later start reuses it); remove DIR to drop it.
set -euo pipefail

dir=$(realpath -m "${1:-/tmp/klique-docker}")
[ -d "$dir" ] || exit 0
export CONTAINERS_CONF="$dir/containers.conf" CONTAINERS_STORAGE_CONF="$dir/storage.conf"
exec 9>"$dir/.lock"
flock 9

if [ -f "$CONTAINERS_STORAGE_CONF" ]; then
  podman rm --all --force --time 0 >/dev/null 2>&1 || true
fi
if [ -f "$dir/podman.pid" ]; then
  pid=$(cat "$dir/podman.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/podman.pid" "$dir/podman.sock"
fi
