#!/usr/bin/env bash
# Build the test control plane from Go modules at pinned releases (nothing prebuilt is fetched):
# kube-apiserver, kube-scheduler, kube-controller-manager, kubectl and etcd from k8s.io/kubernetes (cluster/go.mod),
# and KWOK (sigs.k8s.io/kwok) for nodes. Prints the folder of the binaries. Idempotent: a build
# whose go.mod/go.sum and versions are unchanged is reused (the Go build cache makes a rebuild fast).
#   deploy/k8s-dev/build.sh            -> ~/.cache/klique/k8s-dev-<hash>
#   KLIQUE_K8S_BIN=/somewhere build.sh -> /somewhere
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
KUBERNETES_VERSION=v1.34.4
KWOK_VERSION=v0.8.0
command -v go >/dev/null || { echo "needs Go (1.24 or newer) and its module proxy" >&2; exit 1; }
stamp=$(cat "$here/cluster/go.mod" "$here/cluster/go.sum" "$here/cluster/etcd/main.go" "$0" | sha256sum | cut -c1-12)
bin="${KLIQUE_K8S_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/klique/k8s-dev-$stamp}"
if [ -f "$bin/.built-$stamp" ]; then echo "$bin"; exit 0; fi
mkdir -p "$bin"
# One build at a time (test workers may ask together); the others wait and reuse it.
exec 9>"$bin/.lock"
flock 9
if [ -f "$bin/.built-$stamp" ]; then echo "$bin"; exit 0; fi
minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean"
started=$SECONDS
(cd "$here/cluster" && go build -trimpath -ldflags="$ldflags" -o "$bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl ./etcd) >&2
(cd "$bin" && GOBIN="$bin" GOFLAGS=-mod=mod go install -trimpath -ldflags="-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION") >&2
kwok_module=$(cd "$bin" && go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION
cp "$kwok_module/kustomize/crd/bases/kwok.x-k8s.io_logs.yaml" "$bin/kwok-logs-crd.yaml"
chmod u+w "$bin/kwok-logs-crd.yaml"
echo "built in $((SECONDS - started)) s" >&2
touch "$bin/.built-$stamp"
echo "$bin"
