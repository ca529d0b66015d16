#!/usr/bin/env bash
# Stop the cluster of start.sh: each daemon by the PID in its pid file, its own munged last.
set -uo pipefail

dir=$(realpath -m "${1:-/tmp/klique-slurm}")
running() { [ -n "$(ps -o stat= -p "$1" 2>/dev/null | grep -v Z)" ]; }  # a zombie has stopped
for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/slurmdbd.pid" "$dir/munge/munged.pid"; do
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do running "$pid" || break; sleep 0.25; done
  running "$pid" && kill -9 "$pid" 2>/dev/null
  rm -f "$pidfile"
done
