// Command etcd is the etcd server of the pinned Kubernetes release (the go.etcd.io/etcd/server/v3
// version that k8s.io/kubernetes requires), for the test control plane only.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
