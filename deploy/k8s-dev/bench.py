"""How fast the Kubernetes runner follows pods on the real test control plane (deploy/k8s-dev:
kube-apiserver with etcd; the runner as the worker's ServiceAccount): pod creation, a kubelet's
status write to the ``running`` change out of ``poll()``, and N exits (each with its log read).
The kubelet is played by hand through the API (tests/worker/k8s.py), so kube-scheduler and KWOK
stay out of the figures.

    .venv/bin/python deploy/k8s-dev/bench.py --tasks 200
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from klique.worker.kubernetes.runner import KubernetesRunner  # noqa: E402
from tests import kube  # noqa: E402
from tests.worker.k8s import HAND, Kubelet  # noqa: E402


def task(task_id: int) -> dict:
    runtime = {"image": "busybox", "gpu_resource": "nvidia.com/gpu", "gpu_count": 1, "grace_s": 30}
    return {"id": task_id, "command": "true", "spec": {}, "gpus": "1", "runtime": runtime}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=200)
    count = parser.parse_args().tasks
    folder = Path(tempfile.mkdtemp(prefix="klique-k8s-bench-"))
    cluster = kube.start(folder)
    runner = KubernetesRunner(cluster.worker(), tag="bench", scheduler_name=HAND)
    kubelet = Kubelet(cluster, folder)
    creating, following = [], []
    for task_id in range(1, count + 1):
        began = time.perf_counter()
        runner.start(task(task_id), [])
        creating.append(time.perf_counter() - began)
    for task_id in range(1, count + 1):
        kubelet.run("default", f"klique-{task_id}-0")
        began = time.perf_counter()
        while not any(change.kind == "running" for change in runner.poll()):
            time.sleep(0.001)
        following.append(time.perf_counter() - began)
    for task_id in range(1, count + 1):
        kubelet.exit("default", f"klique-{task_id}-0", 0)
    began, ended = time.perf_counter(), 0
    while ended < count:
        ended += sum(change.kind == "exited" for change in runner.poll())
        time.sleep(0.001)
    exits = time.perf_counter() - began
    runner.background.shutdown(wait=True)  # the deletions of the ended pods
    runner.close()
    kube.stop(cluster)
    p95 = sorted(following)[int(count * 0.95)]
    print(
        f"{count} tasks: create pod median {statistics.median(creating) * 1000:.1f} ms; status write -> "
        f"running change median {statistics.median(following) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms; "
        f"all exits seen {exits:.2f} s after the last write"
    )


if __name__ == "__main__":
    main()
