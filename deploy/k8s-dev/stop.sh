#!/usr/bin/env bash
# Stop the control plane that start.sh started in FOLDER (each process by its pid file).
set -uo pipefail
dir="$1"
for name in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
  [ -f "$dir/$name.pid" ] || continue
  pid=$(cat "$dir/$name.pid")
  kill "$pid" 2>/dev/null
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null
  rm -f "$dir/$name.pid"
done
exit 0
