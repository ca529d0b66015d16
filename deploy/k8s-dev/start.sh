#!/usr/bin/env bash
# Start a real Kubernetes control plane for tests in FOLDER (built by build.sh; nothing prebuilt is
# fetched): etcd, kube-apiserver (RBAC and Node authorization, ServiceAccount tokens),
# kube-scheduler, kube-controller-manager and KWOK, whose fake kubelets run the GPU nodes of
# nodes.yaml through the stages of kwok.yaml and serve pod logs from files (the Logs CRD).
#   deploy/k8s-dev/start.sh FOLDER      prints KUBECONFIG=FOLDER/admin.kubeconfig and the server URL
#   deploy/k8s-dev/stop.sh FOLDER       stops it (each process's pid is in FOLDER/*.pid)
# Ports are free ones picked at start; several control planes can run side by side.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="$(mkdir -p "$1" && cd "$1" && pwd)"
bin="${KLIQUE_K8S_BIN:-$("$here/build.sh")}"
pki="$dir/pki"
mkdir -p "$pki" "$dir/logs"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
etcd_port=$(free_port); peer_port=$(free_port); api_port=$(free_port); kwok_port=$(free_port)
server="https://127.0.0.1:$api_port"

# A CA; the API server's serving certificate; a client certificate of system:masters for the tests
# and the controllers; the key pair that signs ServiceAccount tokens.
openssl_quiet() { openssl "$@" 2>/dev/null; }
openssl_quiet req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=klique-dev-ca" \
  -keyout "$pki/ca.key" -out "$pki/ca.crt"
sign() { # name subject [subjectAltName]
  openssl_quiet req -newkey rsa:2048 -nodes -subj "$2" -keyout "$pki/$1.key" -out "$pki/$1.csr"
  if [ -n "${3:-}" ]; then printf 'subjectAltName=%s\n' "$3" > "$pki/$1.ext"; else : > "$pki/$1.ext"; fi
  openssl_quiet x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 2 -extfile "$pki/$1.ext" -out "$pki/$1.crt"
}
sign apiserver "/CN=kube-apiserver" "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes.default.svc"
sign admin "/O=system:masters/CN=klique-dev-admin"
sign kwok "/CN=kwok" "IP:127.0.0.1,DNS:localhost"
openssl_quiet genrsa -out "$pki/sa.key" 2048
openssl_quiet rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub"

cat > "$dir/admin.kubeconfig" <<CONFIG
apiVersion: v1
kind: Config
clusters:
- name: klique-dev
  cluster:
    server: $server
    certificate-authority: $pki/ca.crt
users:
- name: admin
  user:
    client-certificate: $pki/admin.crt
    client-key: $pki/admin.key
contexts:
- name: klique-dev
  context: {cluster: klique-dev, user: admin}
current-context: klique-dev
CONFIG

start() { # name command...
  local name=$1; shift
  nohup "$@" >"$dir/logs/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
}
wait_for() { # what seconds command...
  local what=$1 seconds=$2; shift 2
  for _ in $(seq 1 $((seconds * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "$what did not come up in ${seconds} s; its log:" >&2
  tail -n 30 "$dir/logs/$what.log" >&2
  exit 1
}

start etcd "$bin/etcd" --name klique-dev --data-dir "$dir/etcd" --unsafe-no-fsync \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-cluster "klique-dev=http://127.0.0.1:$peer_port" --log-level warn
wait_for etcd 30 curl -fsS "http://127.0.0.1:$etcd_port/health"
echo "http://127.0.0.1:$etcd_port" >"$dir/etcd.url"

# No watch cache: a watch resumed from a compacted resourceVersion is answered 410 Gone by etcd at
# once (tests compact etcd to play a long outage).
# TaintNodesByCondition is off and so is the node lifecycle controller: KWOK's nodes post Ready
# once and no heartbeats, which would otherwise have them tainted and their pods evicted.
# shellcheck disable=SC2054 # "Node,RBAC" is one argument
apiserver=("$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port"
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port"
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key"
  --client-ca-file "$pki/ca.crt" --authorization-mode Node,RBAC
  --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$pki/sa.pub"
  --service-account-signing-key-file "$pki/sa.key" --service-cluster-ip-range 10.96.0.0/16
  --kubelet-client-certificate "$pki/admin.crt" --kubelet-client-key "$pki/admin.key"
  --kubelet-preferred-address-types InternalIP
  --disable-admission-plugins TaintNodesByCondition --allow-privileged
  --enable-priority-and-fairness=false --profiling=false --watch-cache=false)
# The same command in a script of its own, for restart.sh (tests of a restarted API server).
printf '#!/bin/sh\nexec %s\n' "$(printf '%q ' "${apiserver[@]}")" >"$dir/run-kube-apiserver.sh"
chmod +x "$dir/run-kube-apiserver.sh"
start kube-apiserver "$dir/run-kube-apiserver.sh"
wait_for kube-apiserver 90 curl -fsS --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "$server/readyz"

start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$dir/admin.kubeconfig" \
  --authentication-kubeconfig "$dir/admin.kubeconfig" --authorization-kubeconfig "$dir/admin.kubeconfig" \
  --leader-elect=false --bind-address 127.0.0.1 --secure-port 0 \
  --controllers '*,-node-lifecycle-controller' --service-account-private-key-file "$pki/sa.key" \
  --root-ca-file "$pki/ca.crt" --use-service-account-credentials=false
start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$dir/admin.kubeconfig" \
  --authentication-kubeconfig "$dir/admin.kubeconfig" --authorization-kubeconfig "$dir/admin.kubeconfig" \
  --leader-elect=false --bind-address 127.0.0.1 --secure-port 0

echo "$bin" >"$dir/bin.path"
kubectl_() { "$bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" "$@"; }
kubectl_ apply --server-side -f "$bin/kwok-logs-crd.yaml" >/dev/null
start kwok "$bin/kwok" --kubeconfig "$dir/admin.kubeconfig" --config "$here/kwok.yaml" \
  --manage-all-nodes=false --manage-nodes-with-label-selector type=kwok \
  --node-ip 127.0.0.1 --node-port "$kwok_port" --server-address "127.0.0.1:$kwok_port" \
  --tls-cert-file "$pki/kwok.crt" --tls-private-key-file "$pki/kwok.key" --enable-crds Logs
kubectl_ create -f "$here/nodes.yaml" >/dev/null
wait_for kwok 60 kubectl_ wait --for=condition=Ready node --all --timeout=1s
# Pods need their namespace's "default" ServiceAccount, which the controller manager makes.
wait_for kube-controller-manager 60 kubectl_ get serviceaccount default -n default
echo "KUBECONFIG=$dir/admin.kubeconfig"
echo "KUBECTL=$bin/kubectl"
echo "SERVER=$server"
