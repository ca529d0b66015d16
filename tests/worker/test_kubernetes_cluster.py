"""Kubernetes mode against the whole real control plane (tests/kube.py): kube-scheduler binds the
runner's pods to KWOK's GPU and MIG nodes, KWOK runs them to their exit code and ends them on
deletion (SIGTERM: 143), and the real RBAC authorizer answers the worker's ServiceAccount: what
deploy/kubernetes grants is enough, and one verb fewer breaks the runner."""

import re

import pytest
from kubernetes import client

from klique.worker.kubernetes.runner import KubernetesRunner
from klique.worker.runs import StartFailed
from tests.kube import WORKER_ACCOUNT, WORKER_NAMESPACE, manifests
from tests.worker.k8s import Runners, eventually, exit_with, stop_takes
from tests.worker.test_kubernetes_runner import changes_until, kinds, task

GPU_NODES = {"gpu-node-1", "gpu-node-2"}


@pytest.fixture
def make_runner(kube_cluster, request):
    """Runners whose pods go to kube-scheduler (no scheduler name), in namespace ``scheduled``."""
    runners = Runners(kube_cluster, request.node.name[-40:], namespace="scheduled")
    yield runners
    runners.close()


@pytest.fixture
def api(kube_cluster):
    return kube_cluster.core


def pods_of(api, task_id, namespace="scheduled"):
    return api.list_namespaced_pod(namespace, label_selector=f"klique.io/task={task_id}").items


def test_the_scheduler_binds_a_whole_gpu_pod_to_a_gpu_node_and_kwok_runs_it_to_its_exit_code(
    make_runner, api
):
    runner = make_runner()
    runner.start(task(201, gpus="2", gpu_count=2), [])
    started = changes_until(runner, lambda seen: "running" in kinds(seen))
    assert started[-1].detail["node"] in GPU_NODES
    exit_with(api, "scheduled", "klique-201-0", 3)
    ended = changes_until(runner, lambda seen: "exited" in kinds(seen))
    assert ended[-1].exit_code == 3
    eventually(lambda: not pods_of(api, 201), what="the ended pod deleted")


def test_a_fraction_on_a_mig_resource_lands_on_the_mig_node(make_runner, api):
    runner = make_runner()
    runner.start(task(202, gpus="0.125", gpu_resource="nvidia.com/mig-1g.10gb", gpu_count=1), [])
    started = changes_until(runner, lambda seen: "running" in kinds(seen))
    assert started[-1].detail["node"] == "mig-node-1"
    runner.terminate(202, 20)
    assert kinds(changes_until(runner, lambda seen: bool(seen))) == ["exited"]


def test_terminate_deletes_with_the_grace_and_sigterm_ends_the_container_with_143(make_runner, api):
    runner = make_runner()
    runner.start(task(203), [])
    changes_until(runner, lambda seen: "running" in kinds(seen))
    stop_takes(api, "scheduled", "klique-203-0", 1500)
    runner.terminate(203, 20)
    pod = api.read_namespaced_pod("klique-203-0", "scheduled")
    assert pod.metadata.deletion_grace_period_seconds == 20
    ended = changes_until(runner, lambda seen: bool(seen))
    assert kinds(ended) == ["exited"] and ended[0].exit_code == 143
    eventually(lambda: not pods_of(api, 203), what="the pod gone")


def test_a_multi_node_task_runs_once_every_pod_is_bound_on_a_node_of_its_own(make_runner, api):
    runner = make_runner()
    runner.start(task(204, nodes=2, gpus="8", gpu_count=8), [])
    started = changes_until(runner, lambda seen: "running" in kinds(seen))
    assert kinds(started) == ["running"]
    assert {pod.spec.node_name for pod in pods_of(api, 204)} == GPU_NODES
    runner.terminate(204, 5)
    assert kinds(changes_until(runner, lambda seen: bool(seen))) == ["exited"]


def test_a_multi_node_task_that_cannot_be_bound_whole_is_failed_and_none_of_its_pods_is_left(
    make_runner, api
):
    """All or none: three pods of 8 GPUs on two nodes of 8. Two are bound and run; the third stays
    unschedulable; at the pending timeout the task fails with the scheduler's message, and every
    pod (the two running ones too) is deleted, so no GPU stays held by a task that cannot start."""
    runner = make_runner(pending_timeout_s=3)
    runner.start(task(205, nodes=3, gpus="8", gpu_count=8), [])
    failed = changes_until(runner, lambda seen: bool(seen), timeout=30)
    assert kinds(failed) == ["failed"]
    assert re.search(r"0/\d+ nodes are available: .*Insufficient nvidia.com/gpu", failed[0].detail["error"])
    eventually(lambda: not pods_of(api, 205), timeout=30, what="every pod of the task deleted")


def test_the_worker_cannot_touch_a_namespace_it_holds_no_role_in(kube_cluster, api):
    """The real authorizer: without role.yaml's Role in a namespace the create is forbidden."""
    api.create_namespace({"metadata": {"name": "no-role"}})
    runner = KubernetesRunner(kube_cluster.worker(), tag="no-role", namespace="no-role")
    try:
        with pytest.raises(StartFailed) as refused:
            runner.start(task(206), [])
        assert "forbidden" in str(refused.value).lower()
    finally:
        runner.close()
    assert not pods_of(api, 206, "no-role")


def test_one_verb_fewer_than_role_yaml_grants_breaks_the_runner(kube_cluster, api):
    """role.yaml without ``delete`` on pods: the runner starts the pod but cannot stop it; the
    delete is refused (403) and kept to try again, and the pod runs on."""
    namespace = "one-verb-fewer"
    api.create_namespace({"metadata": {"name": namespace}})
    for document in manifests("role.yaml"):
        document["metadata"]["namespace"] = namespace
        if document["kind"] == "Role":
            for rule in document["rules"]:
                if rule["resources"] == ["pods"]:
                    rule["verbs"].remove("delete")
        kube_cluster.apply([document])
    # Without the optional ClusterRole too (it grants delete on pods in every namespace).
    kube_cluster.kubectl("delete", "clusterrolebinding", "klique-worker-all-namespaces")
    runner = KubernetesRunner(kube_cluster.worker(), tag="one-verb-fewer", namespace=namespace)
    try:
        runner.start(task(207), [])
        changes_until(runner, lambda seen: "running" in kinds(seen))
        runner.terminate(207, 5)
        assert list(runner.retries) == [("pod", namespace, "klique-207-0")]
        assert api.read_namespaced_pod("klique-207-0", namespace).metadata.deletion_timestamp is None
        denied = kube_cluster.kubectl(
            "auth", "can-i", "delete", "pods", "-n", namespace,
            f"--as=system:serviceaccount:{WORKER_NAMESPACE}:{WORKER_ACCOUNT}", check=False,
        )  # fmt: skip
        assert denied.strip().startswith("no")
    finally:
        runner.close()
        kube_cluster.apply(manifests("cluster-role.yaml"))
        api.delete_namespaced_pod("klique-207-0", namespace, grace_period_seconds=0)


def test_the_runner_as_the_service_account_may_do_exactly_what_role_yaml_grants(kube_cluster):
    """What the real authorizer answers for the worker's ServiceAccount in a task namespace."""
    who = f"--as=system:serviceaccount:{WORKER_NAMESPACE}:{WORKER_ACCOUNT}"
    kube_cluster.namespace("scheduled")

    def can(verb, resource):
        resource, _, subresource = resource.partition("/")
        extra = [f"--subresource={subresource}"] if subresource else []
        answer = kube_cluster.kubectl(
            "auth", "can-i", verb, resource, *extra, "-n", "scheduled", who, check=False
        )
        return answer.strip().startswith("yes")

    granted = {(verb, resource) for verb in ("create", "list", "watch", "delete") for resource in ("pods",)}
    granted |= {("get", "pods/log"), ("create", "services"), ("list", "services"), ("delete", "services")}
    for verb, resource in granted:
        assert can(verb, resource), (verb, resource)
    for verb, resource in [
        ("get", "pods"),
        ("update", "pods"),
        ("patch", "pods"),
        ("create", "pods/exec"),
        ("get", "secrets"),
        ("list", "secrets"),
        ("create", "namespaces"),
        ("get", "services"),
    ]:
        assert not can(verb, resource), (verb, resource)  # fmt: skip
    assert isinstance(
        client.CoreV1Api(kube_cluster.worker()).list_namespaced_pod("scheduled"), client.V1PodList
    )
    cluster_wide = kube_cluster.kubectl("auth", "can-i", "list", "nodes", who, check=False)
    assert cluster_wide.strip().startswith("yes")  # node-reader.yaml: the GPUs the pool really has
    assert (
        not kube_cluster.kubectl("auth", "can-i", "get", "nodes", who, check=False).strip().startswith("yes")
    )


def test_the_daemon_sees_the_allocatable_gpus_of_the_ready_nodes_its_pods_may_use(kube_cluster, api):
    """The two GPU nodes of 8 (nodeSelector on the product label): 16; a node cordoned drops out."""
    product = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    runner = KubernetesRunner(
        kube_cluster.worker(), tag="observe", namespace="scheduled", node_selector=product
    )
    try:
        assert runner.observed_gpus() == 16
        api.patch_node("gpu-node-2", {"spec": {"unschedulable": True}})
        assert runner.observed_gpus() == 8
    finally:
        api.patch_node("gpu-node-2", {"spec": {"unschedulable": False}})
        runner.close()
    everything = KubernetesRunner(kube_cluster.worker(), tag="observe-all", namespace="scheduled")
    try:
        assert everything.observed_gpus() == 8 + 8 + 512  # the hand-played node too; MIG slices are not GPUs
    finally:
        everything.close()


def test_pods_go_only_to_the_nodes_of_the_node_selector(make_runner, api):
    runner = make_runner(node_selector={"kubernetes.io/hostname": "gpu-node-2"})
    runner.start(task(208), [])
    started = changes_until(runner, lambda seen: "running" in kinds(seen))
    assert started[-1].detail["node"] == "gpu-node-2"
    assert pods_of(api, 208)[0].spec.node_selector == {"kubernetes.io/hostname": "gpu-node-2"}


def test_without_the_node_reader_role_the_daemon_serves_its_declared_gpus(kube_cluster):
    kube_cluster.kubectl("delete", "clusterrolebinding", "klique-worker-nodes")
    runner = KubernetesRunner(kube_cluster.worker(), tag="no-nodes", namespace="scheduled")
    try:
        assert runner.observed_gpus() is None
    finally:
        runner.close()
        kube_cluster.apply(manifests("node-reader.yaml"))
