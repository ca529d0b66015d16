"""Kubernetes mode: each claimed task becomes pods (one per node, ``restartPolicy: Never``) in the
task's namespace, built with the official ``kubernetes`` client (in-cluster config or a kubeconfig).

The daemon follows its pods with one watch per namespace in use (label ``klique.io/worker=<tag>``),
resumed from the last resourceVersion after a drop and re-listed when the server answers 410 Gone.
A background thread per namespace feeds a queue; ``poll`` only drains it:

- ``running`` once every pod of the task runs; ``exited`` with the container's exit code when a pod
  ends (several nodes: the first non-zero code, else 0 once all succeeded), its log tail read first;
- ``failed`` when the pods are still pending past the pending timeout because no node can take
  them (the scheduler's message) or their image cannot be pulled; ``released`` when pending past
  it for another reason, and when someone else deletes or evicts a pod (the pool took it back):
  then once every pod of the task is over (a drain's or an eviction's grace is let run, the other
  pods get the task's grace), never while a container of it may still run.

A pending pod is counted and charged from placement, like any placed task; the pending timeout
bounds that. ``terminate`` deletes the pods with the profile's grace period (the kubelet sends
SIGTERM, then SIGKILL); ``kill`` deletes them again with 1 s of grace. The runner never
force-deletes (grace 0): that forgets a pod whose container may still run. A delete that fails is
tried again from ``poll`` with a backoff until it succeeds; deletes name the pod's uid, so a
later pod of the same name is never hit. A pod create that fails (its answer lost, say) is
followed by a sweep of the task's pods and Service carrying this worker's tag. After a daemon
restart ``recover`` finds the pods by the worker label (with each task's pool label), and
``adopt`` keeps following those the control plane handed back and deletes those the daemon drops
(another pool's, under the same hostname, are left alone).

Each API call made on the daemon's thread is tried once and waits at most ``API_TIMEOUT_S``.

A task with a time limit is stopped by the daemon's own timer (its pods deleted with the grace);
its pods also carry ``activeDeadlineSeconds`` as a backstop, and a pod failed at that deadline is
an exit that timed out (pods.py).

Several nodes: pods ``klique-<task>-<index>`` with hostname/subdomain set, and a headless Service
``klique-<task>`` for rendezvous (``KLIQUE_MASTER_ADDR=klique-<task>-0.klique-<task>``).

The runner (``runner.KubernetesRunner``) builds what it creates in pods.py, follows it in
watch.py, deletes it in deletes.py and finds it again after a restart in adoption.py; api.py
holds the client and the call timeout.
"""

from klique.worker.kubernetes.runner import KubernetesRunner

__all__ = ["KubernetesRunner"]
