#!/usr/bin/env bash
# Stop the cluster of start.sh: each daemon by the PID in its pid file; munged is left running.
set -uo pipefail

dir=$(realpath -m "${1:-/tmp/klique-slurm}")
for daemon in slurmd slurmctld slurmdbd; do
  pidfile="$dir/$daemon.pid"
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$pidfile"
done
