#!/usr/bin/env bash
# Check that the dev cluster starts beside another munged (as another user's would run, with its
# own socket and key): start a stock munged, then start.sh into a temp folder, run a batch job,
# stop.sh; the other munged must still answer on its socket afterwards. Used by CI (.ci/run).
#
#   deploy/slurm-dev/check-beside.sh
set -euo pipefail
here=$(dirname "$(realpath "$0")")
other=$(mktemp -d /tmp/klique-other-munge.XXXXXX)
cluster=$(mktemp -d /tmp/klique-slurm-check.XXXXXX)

cleanup() {
  "$here/stop.sh" "$cluster" >/dev/null 2>&1 || true
  if [ -f "$other/munged.pid" ]; then
    pid=$(cat "$other/munged.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do ps -o stat= -p "$pid" | grep -qv Z || break; sleep 0.25; done
  fi
  rm -rf "$other" "$cluster"
}
trap cleanup EXIT

chown munge:munge "$other"
chmod 755 "$other"
runuser -u munge -- mungekey --create --keyfile="$other/munge.key"
runuser -u munge -- /usr/sbin/munged --socket="$other/munge.socket" --key-file="$other/munge.key" \
  --pid-file="$other/munged.pid" --log-file="$other/munged.log" --seed-file="$other/munged.seed"
munge -n --socket="$other/munge.socket" >/dev/null
echo "slurm-dev check: another munged runs (pid $(cat "$other/munged.pid"), socket $other/munge.socket)"

exports=$("$here/start.sh" "$cluster")
eval "$exports"
sbatch --wait --gres=gpu:1 --output="$cluster/job.out" --wrap true >/dev/null
echo "slurm-dev check: a batch job ran on the dev cluster"
"$here/stop.sh" "$cluster"

kill -0 "$(cat "$other/munged.pid")"
munge -n --socket="$other/munge.socket" | unmunge --socket="$other/munge.socket" >/dev/null
echo "slurm-dev check: the other munged survived and still answers"
