#!/usr/bin/env bash
# A Docker API for tests of Docker mode: Podman's service (`podman system service`) with runc, its
# own image store, run state and configuration under one folder, and a tiny local image
# `localhost/klique-busybox:dev` (Debian's static busybox) since no image registry is reachable.
#
#   deploy/docker-dev/start.sh [DIR]    (default /tmp/klique-docker; prints `export DOCKER_HOST=...`)
#   deploy/docker-dev/stop.sh  [DIR]
#
# Needs, as root: apt-get install -y --no-install-recommends podman runc busybox-static
# Idempotent: a second start on a running DIR only prints the export line.
set -euo pipefail

dir=$(realpath -m "${1:-/tmp/klique-docker}")
socket="$dir/podman.sock"
image=localhost/klique-busybox:dev
busybox=${BUSYBOX:-/bin/busybox}
export CONTAINERS_CONF="$dir/containers.conf" CONTAINERS_STORAGE_CONF="$dir/storage.conf"

mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9

answers() { curl -sf --max-time 2 --unix-socket "$socket" http://d/_ping >/dev/null 2>&1; }

if [ -f "$dir/podman.pid" ] && kill -0 "$(cat "$dir/podman.pid")" 2>/dev/null && answers; then
  echo "export DOCKER_HOST=unix://$socket"
  exit 0
fi
mkdir -p "$dir/storage" "$dir/run" "$dir/tmp"

# The machine's hard rlimits are below Podman's defaults (runc: "error setting rlimit"), and crun
# does not run on a hybrid cgroup hierarchy: clear the ulimits and use runc with cgroupfs.
cat >"$CONTAINERS_CONF" <<CONF
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
events_logfile_path = "$dir/events.log"
tmp_dir = "$dir/tmp"
CONF
cat >"$CONTAINERS_STORAGE_CONF" <<CONF
[storage]
driver = "overlay"
graphroot = "$dir/storage"
runroot = "$dir/run"
CONF

if ! podman image exists "$image"; then
  rootfs=$(mktemp -d)
  trap 'rm -rf "$rootfs"' EXIT
  mkdir -p "$rootfs/bin" "$rootfs/tmp" "$rootfs/proc" "$rootfs/sys" "$rootfs/dev" "$rootfs/etc"
  cp "$busybox" "$rootfs/bin/busybox"
  for tool in sh sleep echo cat env kill true false ls id; do
    ln -s busybox "$rootfs/bin/$tool"
  done
  tar -C "$rootfs" -c . | podman import --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/bin' - "$image" \
    >"$dir/import.log" 2>&1 || { cat "$dir/import.log" >&2; exit 1; }
fi

rm -f "$socket"
setsid podman --runtime runc system service --time=0 "unix://$socket" \
  </dev/null >>"$dir/service.log" 2>&1 9>&- &
echo $! >"$dir/podman.pid"
for ((i = 0; i < 100; i++)); do
  answers && break
  kill -0 "$(cat "$dir/podman.pid")" 2>/dev/null || { cat "$dir/service.log" >&2; exit 1; }
  sleep 0.1
done
answers || { echo "podman service did not answer on $socket" >&2; exit 1; }
echo "export DOCKER_HOST=unix://$socket"
