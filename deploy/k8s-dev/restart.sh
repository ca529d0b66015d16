#!/usr/bin/env bash
# Restart the API server of the control plane start.sh started in FOLDER: stop it (SIGTERM, its
# watches drop), start it again with the same command, wait until it is ready. For tests.
#   deploy/k8s-dev/restart.sh FOLDER
set -euo pipefail
dir="$1"
pid=$(cat "$dir/kube-apiserver.pid")
kill "$pid" 2>/dev/null || true
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -9 "$pid" 2>/dev/null || true
nohup "$dir/run-kube-apiserver.sh" >>"$dir/logs/kube-apiserver.log" 2>&1 &
echo $! >"$dir/kube-apiserver.pid"
server=$(sed -n 's/^ *server: //p' "$dir/admin.kubeconfig")
for _ in $(seq 1 450); do
  if curl -fsS --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" \
    "$server/readyz" >/dev/null 2>&1; then exit 0; fi
  sleep 0.2
done
echo "the API server did not come back in 90 s" >&2
tail -n 30 "$dir/logs/kube-apiserver.log" >&2
exit 1
