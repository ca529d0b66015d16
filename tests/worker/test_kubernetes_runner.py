"""Kubernetes mode: the runner on the official client against a real API server (tests/kube.py),
as the worker's ServiceAccount under deploy/kubernetes's RBAC. Most tests play scheduler and kubelet
by hand through the real API (their pods' scheduler is ``HAND``) to step a pod through its life;
the rest let kube-scheduler and KWOK's nodes run it. Network faults come from a proxy in front of
the API server; a long outage is played by compacting etcd."""

import argparse
import http.server
import json
import random
import re
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
import urllib3
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from klique.worker.daemon import Daemon, Settings
from klique.worker.kubernetes import deletes
from klique.worker.kubernetes.runner import KubernetesRunner
from klique.worker.runs import StartFailed
from tests.kube import FaultProxy, restart_apiserver
from tests.worker.fakes import Clock, ScriptedControlPlane
from tests.worker.k8s import HAND, Kubelet, Runners, eventually

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster(kube_cluster):
    for namespace in ("ml", "ml-vision"):
        kube_cluster.namespace(namespace)
    return kube_cluster


@pytest.fixture
def api(cluster):
    return cluster.core


@pytest.fixture
def kubelet(cluster, tmp_path):
    return Kubelet(cluster, tmp_path)


@pytest.fixture
def proxy(cluster):
    faults = FaultProxy(cluster.server)
    yield faults
    faults.shutdown()


@pytest.fixture
def make_runner(cluster, request):
    """Runners whose pods are the hand-played kubelet's unless ``scheduler_name`` says otherwise."""
    runners = Runners(cluster, request.node.name[-40:], scheduler_name=HAND)
    yield runners
    runners.close()


def task(task_id, command="python train.py", *, gpus="1", nodes=1, spec=None, pool="1", **runtime):
    return {
        "id": task_id,
        "name": f"t{task_id}",
        "command": command,
        "spec": spec or {},
        "gpus": gpus,
        "nodes": nodes,
        "slots": [],
        "preemption_count": 0,
        "labels": {
            "task": str(task_id),
            "pool": pool,
            "group": "vision",
            "project": "detector",
            "user": "ada",
        },
        "runtime": {
            "image": "pytorch/pytorch:2.4.0",
            "namespace": "",
            "gpu_resource": "nvidia.com/gpu",
            "gpu_count": 1,
            "memory_limit_mb": None,
            "grace_s": 20.0,
            **runtime,
        },
    }


def changes_until(runner, done, timeout=15.0):
    """Poll the runner until the changes seen so far satisfy ``done``; all of them."""
    seen = []

    def check():
        seen.extend(runner.poll())
        return done(seen)

    eventually(check, timeout, what=f"changes (so far {seen})")
    return seen


def plain_client(url: str) -> client.ApiClient:
    """A client of ``url`` with no credentials (a port where nothing, or nothing useful, answers)."""
    configuration = client.Configuration()
    configuration.host = url
    return client.ApiClient(configuration)


def kinds(changes):
    return [change.kind for change in changes]


def env_of(pod) -> dict:
    return {item.name: item.value for item in pod.spec.containers[0].env}


def test_a_whole_gpu_task_becomes_a_labelled_pod_with_the_gpu_as_a_limit(make_runner, api):
    runner = make_runner(tag="node-1")
    runner.start(task(101, spec={"env": {"SEED": 7}, "resources": {"cpu": "4", "memory": "16Gi"}}), [])
    pod = api.read_namespaced_pod("klique-101-0", "default")
    assert pod.metadata.labels == {
        "app.kubernetes.io/managed-by": "klique",
        "klique.io/worker": "node-1",
        "klique.io/task": "101",
        "klique.io/pool": "1",
        "klique.io/group": "vision",
        "klique.io/project": "detector",
        "klique.io/user": "ada",
        "klique.io/node-index": "0",
    }
    container = pod.spec.containers[0]
    assert container.image == "pytorch/pytorch:2.4.0"
    assert container.command == ["/bin/sh", "-c", "python train.py"]
    assert container.resources.limits == {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"}
    # The API server defaults an extended resource's request to its limit.
    assert container.resources.requests == {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"}
    assert pod.spec.restart_policy == "Never" and pod.spec.termination_grace_period_seconds == 20
    assert pod.spec.automount_service_account_token is False
    env = env_of(pod)
    assert env["SEED"] == "7" and env["KLIQUE_TASK_ID"] == "101" and env["KLIQUE_GPUS"] == "1"
    assert env["KLIQUE_PREEMPTION_COUNT"] == "0" and env["KLIQUE_NODES"] == "1"
    assert "KLIQUE_CHECKPOINT_DIR" not in env  # no PVC: nowhere to keep checkpoints across pods


def test_a_fraction_asks_for_the_extended_resource_it_is_mapped_to_with_the_memory_cap(make_runner, api):
    api.create_namespaced_service_account("default", {"metadata": {"name": "trainer"}})  # IT's, for task pods
    runner = make_runner(checkpoint_pvc="checkpoints", service_account="trainer")
    fraction = task(
        102, gpus="0.25", gpu_resource="nvidia.com/mig-1g.10gb", gpu_count=1, memory_limit_mb=10240
    )
    runner.start(fraction, [])
    pod = api.read_namespaced_pod("klique-102-0", "default")
    assert pod.spec.containers[0].resources.limits == {"nvidia.com/mig-1g.10gb": "1", "memory": "10Gi"}
    assert env_of(pod)["KLIQUE_CHECKPOINT_DIR"] == "/klique/checkpoints/102"
    assert pod.spec.volumes[0].persistent_volume_claim.claim_name == "checkpoints"
    assert pod.spec.containers[0].volume_mounts[0].mount_path == "/klique/checkpoints"
    assert pod.spec.service_account_name == "trainer" and pod.spec.automount_service_account_token


def test_a_fraction_without_a_mapped_resource_is_refused_as_recurring(make_runner, api):
    runner = make_runner()
    with pytest.raises(StartFailed) as refused:
        runner.start(task(103, gpus="0.5", gpu_resource="", gpu_count=0), [])
    assert refused.value.recurs and "IT must map an extended resource" in str(refused.value)
    assert not api.list_namespaced_pod("default", label_selector="klique.io/task=103").items


def test_an_invalid_pod_is_refused_as_recurring_and_a_cpu_task_asks_no_gpu(make_runner, api):
    runner = make_runner()
    with pytest.raises(StartFailed) as refused:
        runner.start(task(104, spec={"resources": {"memory": "lots"}}), [])
    assert refused.value.recurs and "quantities must match the regular expression" in str(refused.value)
    runner.start(task(105, gpus="0", gpu_resource="", gpu_count=0), [])
    assert api.read_namespaced_pod("klique-105-0", "default").spec.containers[0].resources.limits is None


def test_the_pod_goes_to_the_task_namespace(make_runner, api):
    runner = make_runner(namespace="ml")
    runner.start(task(106, namespace="ml-vision"), [])
    runner.start(task(107), [])
    assert api.read_namespaced_pod("klique-106-0", "ml-vision").metadata.namespace == "ml-vision"
    assert api.read_namespaced_pod("klique-107-0", "ml").metadata.namespace == "ml"
    assert set(runner.watchers) == {"ml-vision", "ml"}


def test_a_pod_that_runs_and_exits_reports_running_then_its_exit_code_and_log_tail(make_runner, kubelet, api):
    runner = make_runner()
    runner.start(task(110), [])
    kubelet.run("default", "klique-110-0")
    started = changes_until(runner, lambda seen: "running" in kinds(seen))
    assert started[0].detail["node"] == "hand-node-1" and started[0].detail["pods"] == "klique-110-0"
    kubelet.write_log("default", "klique-110-0", "".join(f"step {i}\n" for i in range(500)) + "loss 0.1\n")
    kubelet.exit("default", "klique-110-0", 3)
    ended = changes_until(runner, lambda seen: "exited" in kinds(seen))
    assert ended[-1].exit_code == 3
    tail = runner.log_tail(110)
    assert tail.endswith("step 499\nloss 0.1\n") and "step 299\n" not in tail
    # The ended pod is deleted; its tail stays.
    eventually(lambda: not api.list_namespaced_pod("default", label_selector="klique.io/task=110").items)
    assert runner.log_tail(110) == tail


def test_a_pod_seen_only_after_it_ended_reports_running_and_its_exit(make_runner, kubelet):
    runner = make_runner()
    runner.start(task(111), [])
    kubelet.bind("default", "klique-111-0")
    kubelet.exit("default", "klique-111-0", 0)
    assert kinds(changes_until(runner, lambda seen: "exited" in kinds(seen))) == ["running", "exited"]


def test_a_pod_no_node_can_take_fails_with_the_schedulers_message_after_the_pending_timeout(make_runner, api):
    """kube-scheduler finds no node with 16 GPUs (KWOK's have 8): its own message is the error."""
    runner = make_runner(pending_timeout_s=3, scheduler_name="")
    runner.start(task(112, gpus="16", gpu_count=16), [])
    failed = changes_until(runner, lambda seen: bool(seen))
    assert kinds(failed) == ["failed"]
    error = failed[0].detail["error"]
    assert re.match(r"not running 3 s after creation: 0/\d+ nodes are available: ", error), error
    assert "Insufficient nvidia.com/gpu" in error
    eventually(lambda: not api.list_namespaced_pod("default", label_selector="klique.io/task=112").items)


def test_a_pod_pending_for_no_known_reason_is_released_after_the_timeout(make_runner):
    runner = make_runner(pending_timeout_s=0.3)
    runner.start(task(113), [])
    released = changes_until(runner, lambda seen: bool(seen))
    assert kinds(released) == ["released"]


def test_terminate_deletes_with_the_grace_and_the_kubelet_finishing_it_ends_the_work(
    make_runner, kubelet, api
):
    runner = make_runner()
    runner.start(task(114), [])
    kubelet.run("default", "klique-114-0")
    changes_until(runner, lambda seen: "running" in kinds(seen))
    kubelet.write_log("default", "klique-114-0", "step 1\n")
    runner.terminate(114, 20)
    pod = api.read_namespaced_pod("klique-114-0", "default")
    assert pod.metadata.deletion_timestamp is not None and pod.metadata.deletion_grace_period_seconds == 20
    time.sleep(0.3)
    assert runner.poll() == []  # still in its grace period
    kubelet.write_log("default", "klique-114-0", "step 1\ncaught SIGTERM, checkpointing\n")
    kubelet.finish_deletion("default", "klique-114-0")
    ended = changes_until(runner, lambda seen: bool(seen))
    assert kinds(ended) == ["exited"] and ended[0].exit_code == 143
    # What it wrote before the stop is kept; its last words only if read before the pod went.
    assert runner.log_tail(114) in ("step 1\n", "step 1\ncaught SIGTERM, checkpointing\n")


def test_kill_deletes_again_with_one_second_of_grace_never_a_force_delete(make_runner, kubelet, api):
    runner = make_runner()
    runner.start(task(115), [])
    kubelet.run("default", "klique-115-0")
    runner.terminate(115, 30)
    runner.kill(115)
    pod = api.read_namespaced_pod("klique-115-0", "default")  # still there until its kubelet ends it
    assert pod.metadata.deletion_grace_period_seconds == 1
    kubelet.finish_deletion("default", "klique-115-0")
    assert kinds(changes_until(runner, lambda seen: bool(seen))) == ["exited"]


def test_terminating_a_pending_pod_removes_it_at_once(make_runner, api):
    runner = make_runner()
    runner.start(task(116), [])
    runner.terminate(116, 30)
    assert not api.list_namespaced_pod("default", label_selector="klique.io/task=116").items
    assert kinds(changes_until(runner, lambda seen: bool(seen))) == ["exited"]


def test_a_pod_deleted_before_a_list_that_was_asked_for_before_it_existed_is_seen_gone(make_runner, api):
    """The watch's list was asked for before the pod was created, but the server answered it after
    the pod was deleted: the list lacks the pod and the watch starts past its DELETED event."""
    runner = make_runner()
    runner.follow = lambda namespace: None  # no watch of our own: the race is played by hand
    asked_at = runner.clock()
    runner.start(task(918), [])
    runner.terminate(918, 30)  # pending: deleted at once
    runner.events.put(("listed", "default", set(), None, asked_at))
    assert kinds(changes_until(runner, lambda seen: bool(seen))) == ["exited"]


def test_a_pod_missing_from_such_a_list_but_still_there_is_not_taken_for_gone(make_runner, api):
    runner = make_runner()
    runner.follow = lambda namespace: None
    asked_at = runner.clock()
    runner.start(task(919), [])
    runner.events.put(("listed", "default", set(), None, asked_at))
    runner.poll()
    runner.background.shutdown(wait=True)  # the check has run
    assert runner.poll() == [] and not runner.works[919].pods["klique-919-0"].deleted


def test_an_evicted_pod_is_released(make_runner, kubelet):
    runner = make_runner()
    runner.start(task(117), [])
    kubelet.run("default", "klique-117-0")
    kubelet.evict("default", "klique-117-0")
    changes = changes_until(runner, lambda seen: "released" in kinds(seen))
    assert changes[-1].detail["reason"] == "Evicted"


def test_a_pod_someone_else_deletes_keeps_its_grace_and_is_released_once_gone(make_runner, kubelet, api):
    """An eviction or a drain deletes with the pod's grace: the task checkpoints, and the control
    plane places it again only once its container has ended (never two runs at once)."""
    runner = make_runner()
    runner.start(task(118), [])
    kubelet.run("default", "klique-118-0")
    changes_until(runner, lambda seen: "running" in kinds(seen))
    api.delete_namespaced_pod("klique-118-0", "default", grace_period_seconds=60)
    eventually(lambda: runner.poll() == [] and runner.works[118].lost is not None, what="the deletion seen")
    time.sleep(0.5)  # what the runner would delete in the background, if anything
    assert runner.poll() == []
    pod = api.read_namespaced_pod("klique-118-0", "default")
    assert pod.metadata.deletion_grace_period_seconds == 60  # not forced, not shortened
    kubelet.finish_deletion("default", "klique-118-0")
    released = changes_until(runner, lambda seen: bool(seen))
    assert kinds(released) == ["released"] and released[0].detail["reason"] == "deleted"


def test_a_multi_node_task_with_one_pod_evicted_stops_the_others_with_their_grace_then_is_released(
    make_runner, kubelet, api
):
    runner = make_runner()
    runner.start(task(119, nodes=2), [])
    kubelet.run("default", "klique-119-0")
    kubelet.run("default", "klique-119-1")
    changes_until(runner, lambda seen: "running" in kinds(seen))
    kubelet.evict("default", "klique-119-1")

    def other_deleted():
        runner.poll()
        return api.read_namespaced_pod("klique-119-0", "default").metadata.deletion_timestamp is not None

    eventually(other_deleted, what="the other pod deleted")
    assert api.read_namespaced_pod("klique-119-0", "default").metadata.deletion_grace_period_seconds == 20
    assert runner.poll() == []  # pod 0 still in its grace
    kubelet.finish_deletion("default", "klique-119-0")
    released = changes_until(runner, lambda seen: bool(seen))
    assert kinds(released) == ["released"] and released[0].detail["reason"] == "Evicted"


def test_an_exit_while_the_watch_is_cut_is_seen_when_it_resumes(make_runner, kubelet, cluster, proxy):
    runner = make_runner(api=cluster.worker(proxy.url))
    runner.start(task(120), [])
    kubelet.run("default", "klique-120-0")
    changes_until(runner, lambda seen: "running" in kinds(seen))
    proxy.cut()
    kubelet.exit("default", "klique-120-0", 5)
    ended = changes_until(runner, lambda seen: bool(seen))
    assert kinds(ended) == ["exited"] and ended[0].exit_code == 5


def outage(cluster, proxy, while_down):
    """The API server unreachable for the runner while ``while_down`` runs, and etcd compacted
    meanwhile: the runner's watch resumes from a resourceVersion that is gone (410)."""
    if cluster.folder is None:
        pytest.skip("compacts etcd: only in a control plane this session started")
    proxy.refuse(True)
    proxy.cut()
    try:
        while_down()
        cluster.compact()
    finally:
        proxy.refuse(False)


def test_an_exit_missed_past_the_kept_history_is_found_by_listing_again_after_410(
    make_runner, kubelet, cluster, proxy
):
    runner = make_runner(api=cluster.worker(proxy.url))
    runner.start(task(121), [])
    kubelet.run("default", "klique-121-0")
    changes_until(runner, lambda seen: "running" in kinds(seen))
    outage(cluster, proxy, lambda: kubelet.exit("default", "klique-121-0", 7))
    ended = changes_until(runner, lambda seen: bool(seen), timeout=30)
    assert kinds(ended) == ["exited"] and ended[0].exit_code == 7


def test_after_the_api_server_restarts_the_watch_resumes_and_sees_the_exit(make_runner, kubelet, cluster):
    if cluster.folder is None:
        pytest.skip("restarts the API server: only in a control plane this session started")
    runner = make_runner()
    runner.start(task(124), [])
    kubelet.run("default", "klique-124-0")
    changes_until(runner, lambda seen: "running" in kinds(seen))
    restart_apiserver(cluster)  # the runner's watch drops and resumes from its resourceVersion
    kubelet.exit("default", "klique-124-0", 4)
    ended = changes_until(runner, lambda seen: bool(seen), timeout=60)
    assert kinds(ended) == ["exited"] and ended[0].exit_code == 4


def test_an_exit_while_the_api_server_restarted_past_a_compaction_is_found_by_listing_again(
    make_runner, kubelet, cluster, proxy
):
    """The API server restarts while the runner cannot reach it, the pod ends and etcd is compacted
    meanwhile: the resumed watch is answered 410 by the restarted server and the runner lists again."""
    runner = make_runner(api=cluster.worker(proxy.url))
    runner.start(task(125), [])
    kubelet.run("default", "klique-125-0")
    changes_until(runner, lambda seen: "running" in kinds(seen))

    def restart_and_exit():
        restart_apiserver(cluster)
        kubelet.exit("default", "klique-125-0", 6)

    outage(cluster, proxy, restart_and_exit)
    ended = changes_until(runner, lambda seen: bool(seen), timeout=60)
    assert kinds(ended) == ["exited"] and ended[0].exit_code == 6


def test_a_pod_deleted_while_the_watch_was_down_is_released_after_listing_again(
    make_runner, kubelet, cluster, proxy, api
):
    runner = make_runner(api=cluster.worker(proxy.url))
    runner.start(task(122), [])
    kubelet.run("default", "klique-122-0")
    changes_until(runner, lambda seen: "running" in kinds(seen))
    outage(
        cluster, proxy, lambda: api.delete_namespaced_pod("klique-122-0", "default", grace_period_seconds=0)
    )
    assert kinds(changes_until(runner, lambda seen: bool(seen), timeout=30)) == ["released"]


def test_a_restarted_daemon_recovers_its_pods_by_label_keeps_the_adopted_and_deletes_the_rest(
    make_runner, kubelet, api
):
    before = make_runner(tag="node-r")
    for task_id in (130, 131, 132):
        before.start(task(task_id), [])
    kubelet.run("default", "klique-130-0")
    make_runner(tag="node-other").start(task(133), [])
    before.close()

    after = make_runner(tag="node-r")
    assert after.recover() == {130: "1", 131: "1", 132: "1"}
    after.adopt([task(130), task(131)], drop=[131, 132])
    remaining = {
        pod.metadata.name for pod in api.list_namespaced_pod("default", label_selector="klique.io/task").items
    }
    assert {"klique-130-0", "klique-133-0"} <= remaining
    assert not remaining & {"klique-131-0", "klique-132-0"}
    running = changes_until(after, lambda seen: bool(seen))
    assert kinds(running) == ["running"] and running[0].task_id == 130
    kubelet.exit("default", "klique-130-0", 0)
    ended = changes_until(after, lambda seen: bool(seen))
    assert kinds(ended) == ["exited"] and ended[0].exit_code == 0


def test_a_multi_node_task_is_one_pod_per_node_with_a_headless_service_for_rendezvous(
    make_runner, kubelet, api
):
    runner = make_runner(tag="node-m")
    runner.start(task(140, nodes=3, gpu_count=8, gpus="8"), [])
    service = api.read_namespaced_service("klique-140", "default")
    assert service.spec.cluster_ip == "None"
    assert service.spec.selector == {"klique.io/worker": "node-m", "klique.io/task": "140"}
    for index in range(3):
        pod = api.read_namespaced_pod(f"klique-140-{index}", "default")
        assert pod.spec.hostname == f"klique-140-{index}" and pod.spec.subdomain == "klique-140"
        assert pod.metadata.labels["klique.io/node-index"] == str(index)
        assert pod.spec.containers[0].resources.limits == {"nvidia.com/gpu": "8"}
        env = env_of(pod)
        assert env["KLIQUE_NODES"] == "3" and env["KLIQUE_NODE_INDEX"] == str(index)
        assert env["KLIQUE_MASTER_ADDR"] == "klique-140-0.klique-140"
    kubelet.run("default", "klique-140-0")
    kubelet.run("default", "klique-140-1")
    time.sleep(0.3)
    assert runner.poll() == []  # not every pod runs yet
    kubelet.run("default", "klique-140-2")
    started = changes_until(runner, lambda seen: bool(seen))
    assert (
        kinds(started) == ["running"]
        and started[0].detail["pods"] == "klique-140-0,klique-140-1,klique-140-2"
    )
    kubelet.exit("default", "klique-140-2", 0)
    kubelet.exit("default", "klique-140-1", 9)
    ended = changes_until(runner, lambda seen: bool(seen))
    assert kinds(ended) == ["exited"] and ended[0].exit_code == 9
    # Pod 0 still ran: deleted with one second of grace, gone once its kubelet ended it.
    eventually(lambda: api.read_namespaced_pod("klique-140-0", "default").metadata.deletion_timestamp)
    kubelet.finish_deletion("default", "klique-140-0")
    eventually(lambda: not api.list_namespaced_pod("default", label_selector="klique.io/task=140").items)
    eventually(lambda: not api.list_namespaced_service("default", label_selector="klique.io/task=140").items)


def test_a_multi_node_task_exits_0_once_every_pod_succeeded(make_runner, kubelet):
    runner = make_runner()
    runner.start(task(141, nodes=2), [])
    kubelet.run("default", "klique-141-0")
    kubelet.run("default", "klique-141-1")
    kubelet.exit("default", "klique-141-1", 0)
    changes = changes_until(runner, lambda seen: "running" in kinds(seen))
    assert "exited" not in kinds(changes)
    kubelet.exit("default", "klique-141-0", 0)
    ended = changes_until(runner, lambda seen: bool(seen))
    assert kinds(ended) == ["exited"] and ended[0].exit_code == 0


def test_flags_build_the_runner_from_a_kubeconfig(cluster, tmp_path, monkeypatch, api):
    monkeypatch.setenv("KLIQUE_KUBE_PENDING_TIMEOUT_S", "42")
    cluster.namespace("flags")
    parser = argparse.ArgumentParser()
    KubernetesRunner.add_arguments(parser)
    args = parser.parse_args(
        ["--kubeconfig", str(cluster.kubeconfig), "--kube-namespace", "flags", "--kube-image", "busybox"]
        + ["--kube-scheduler-name", HAND]
    )
    runner = KubernetesRunner.from_args(
        args, state_dir=tmp_path, checkpoint_root=tmp_path, hostname="Host_1.example"
    )
    try:
        assert runner.pending_timeout_s == 42 and runner.tag == "Host_1.example"
        runner.start(task(150, image=""), [])
        pod = api.read_namespaced_pod("klique-150-0", "flags")
        assert pod.spec.containers[0].image == "busybox" and pod.spec.scheduler_name == HAND
    finally:
        runner.close()


def test_the_deployment_manifests_parse_and_grant_only_what_the_runner_calls():
    folder = ROOT / "deploy/kubernetes"
    documents = {}
    for path in sorted(folder.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                documents[
                    (document["kind"], document["metadata"]["name"] if "metadata" in document else "")
                ] = document
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    optional = {"cluster-role.yaml"}  # applied on its own, for namespaces per group
    assert {path.name for path in folder.glob("*.yaml")} - {"kustomization.yaml"} - optional == set(
        kustomization["resources"]
    )
    cluster_role = documents[("ClusterRole", "klique-worker-all-namespaces")]
    assert {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in cluster_role["rules"]} == {
        ("", "pods"): {"list", "watch", "delete"},
        ("", "services"): {"list", "delete"},
    }
    binding = documents[("ClusterRoleBinding", "klique-worker-all-namespaces")]
    assert binding["roleRef"]["name"] == "klique-worker-all-namespaces"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "klique-worker", "namespace": "klique"}]
    role = documents[("Role", "klique-worker")]
    rules = {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert rules == {
        ("", "pods"): {"create", "list", "watch", "delete"},
        ("", "pods/log"): {"get"},
        ("", "services"): {"create", "list", "delete"},
    }
    nodes = documents[("ClusterRole", "klique-worker-nodes")]
    assert nodes["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]
    assert "list_node(" in (ROOT / "klique/worker/kube_nodes.py").read_text()
    assert documents[("ClusterRoleBinding", "klique-worker-nodes")]["subjects"] == binding["subjects"]
    # Every verb granted is one the runner calls, and every call is granted (client method names
    # say the verb; the watch streams list_namespaced_pod).
    source = "".join(path.read_text() for path in sorted((ROOT / "klique/worker/kubernetes").glob("*.py")))
    resource_of = {"pod": "pods", "pod_log": "pods/log", "service": "services"}
    needed = {("", "pods"): {"watch"}}
    for verb, kind in re.findall(r"self\.api\.(create|list|read|delete)_namespaced_(\w+)", source):
        needed.setdefault(("", resource_of[kind]), set()).add("get" if verb == "read" else verb)
    assert rules == needed
    deployment = documents[("Deployment", "klique-worker")]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item for item in container["env"]}
    assert env["KLIQUE_WORKER_MODE"]["value"] == "kubernetes"
    assert env["KLIQUE_ENROLMENT_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "klique-worker-enrolment"
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "klique-worker"


def test_the_pending_timeout_waits_while_the_watch_is_down_so_a_pod_that_ran_meanwhile_is_kept(
    make_runner, kubelet, cluster, proxy
):
    runner = make_runner(pending_timeout_s=0.5, api=cluster.worker(proxy.url))
    runner.start(task(123), [])
    eventually(lambda: runner.watchers["default"].healthy, what="the watch up")
    proxy.refuse(True)
    proxy.cut()
    try:
        eventually(lambda: not runner.watchers["default"].healthy, what="the watch down")
        kubelet.run("default", "klique-123-0")
        time.sleep(1)
        assert runner.poll() == []
    finally:
        proxy.refuse(False)
    assert kinds(changes_until(runner, lambda seen: bool(seen), timeout=30)) == ["running"]


def test_kubectl_reads_what_the_runner_creates_and_a_deletion_by_kubectl_releases_the_task(
    make_runner, kubelet, cluster
):
    runner = make_runner(tag="node-kubectl")
    runner.start(task(160, nodes=2), [])
    kubelet.run("default", "klique-160-0")
    kubelet.write_log("default", "klique-160-0", "one\ntwo\nthree\n")

    kubectl = cluster.kubectl

    listed = json.loads(kubectl("get", "pods", "-l", "klique.io/worker=node-kubectl", "-o", "json"))
    assert [pod["metadata"]["name"] for pod in listed["items"]] == ["klique-160-0", "klique-160-1"]
    assert kubectl("get", "pod", "klique-160-0", "-o", "jsonpath={.status.phase}") == "Running"
    assert kubectl("logs", "klique-160-0", "--tail=2") == "two\nthree\n"
    assert kubectl("get", "service", "klique-160", "-o", "jsonpath={.spec.clusterIP}") == "None"
    kubectl("delete", "pod", "klique-160-0", "--grace-period=30", "--wait=false")
    eventually(lambda: runner.poll() == [] and runner.works[160].lost, what="the deletion seen")
    kubelet.finish_deletion("default", "klique-160-0")
    assert kinds(changes_until(runner, lambda seen: "released" in kinds(seen)))[-1] == "released"


def test_a_pod_left_by_an_earlier_run_hands_the_task_back_and_is_deleted_when_it_is_ours(make_runner, api):
    make_runner(tag="node-s").start(task(170), [])
    make_runner(tag="node-t").start(task(171), [])
    runner = make_runner(tag="node-s")
    for task_id in (170, 171):
        with pytest.raises(StartFailed) as refused:
            runner.start(task(task_id), [])
        assert not refused.value.recurs and "already exists" in str(refused.value)
    assert not api.list_namespaced_pod("default", label_selector="klique.io/task=170").items
    assert api.read_namespaced_pod("klique-171-0", "default").metadata.labels["klique.io/worker"] == "node-t"
    runner.start(task(170), [])  # handed back, claimed again: it starts


def test_an_adopted_task_is_found_in_its_own_namespace_when_the_recovery_did_not_see_it(make_runner, kubelet):
    make_runner(tag="node-g").start(task(172, namespace="ml-vision"), [])
    kubelet.run("ml-vision", "klique-172-0")
    after = make_runner(tag="node-g")
    after.adopt([task(172, namespace="ml-vision")], drop=[])
    assert kinds(changes_until(after, lambda seen: bool(seen))) == ["running"]


def test_pods_and_services_carry_the_pool_and_recover_names_each_tasks_pool(make_runner, api):
    runner = make_runner(tag="node-p")
    runner.start(task(173, nodes=2, pool="7"), [])
    pods = api.list_namespaced_pod("default", label_selector="klique.io/task=173").items
    service = api.read_namespaced_service("klique-173", "default")
    assert {pod.metadata.labels["klique.io/pool"] for pod in pods} == {"7"}
    assert service.metadata.labels["klique.io/pool"] == "7"
    runner.close()
    assert make_runner(tag="node-p").recover() == {173: "7"}


def test_a_restarted_daemon_of_another_pool_with_the_same_hostname_deletes_only_what_it_drops(
    make_runner, kubelet, api
):
    """Two pools may each run a daemon named like the cluster (the control plane keys workers by
    pool and hostname): pool 2's restarted daemon finds pool 1's pods under the same tag, and the
    daemon drops only its own pool's (or unlabelled) work, which is all ``adopt`` deletes."""
    pool_1 = make_runner(tag="gpu-cluster-1")
    pool_1.start(task(174, pool="1"), [])
    kubelet.run("default", "klique-174-0")
    pool_2 = make_runner(tag="gpu-cluster-1")
    pool_2.start(task(175, pool="2"), [])
    pool_2.close()
    restarted = make_runner(tag="gpu-cluster-1")
    found = restarted.recover()
    assert found == {174: "1", 175: "2"}
    restarted.adopt([], drop=[task_id for task_id, pool in found.items() if pool in ("", "2")])
    pod = api.read_namespaced_pod("klique-174-0", "default")
    assert pod.metadata.deletion_timestamp is None, "pool 1's running pod was deleted"
    assert not api.list_namespaced_pod("default", label_selector="klique.io/task=175").items
    assert kinds(changes_until(pool_1, lambda seen: bool(seen))) == ["running"]


def test_a_stop_whose_deletes_failed_while_the_api_was_unreachable_deletes_once_it_answers(
    make_runner, kubelet, api
):
    runner = make_runner()
    runner.start(task(176), [])
    kubelet.run("default", "klique-176-0")
    changes_until(runner, lambda seen: "running" in kinds(seen))
    answering = runner.api.delete_namespaced_pod
    # Connection refused: nothing listens on port 1.
    runner.api.delete_namespaced_pod = client.CoreV1Api(
        plain_client("http://127.0.0.1:1")
    ).delete_namespaced_pod
    runner.terminate(176, 20)
    runner.kill(176)
    assert runner.poll() == []
    assert api.read_namespaced_pod("klique-176-0", "default").metadata.deletion_timestamp is None
    runner.api.delete_namespaced_pod = answering

    def deleting():
        runner.poll()
        return api.read_namespaced_pod("klique-176-0", "default").metadata.deletion_timestamp

    eventually(deleting, what="the delete tried again")
    assert api.read_namespaced_pod("klique-176-0", "default").metadata.deletion_grace_period_seconds == 1
    assert not runner.retries
    kubelet.finish_deletion("default", "klique-176-0")
    assert kinds(changes_until(runner, lambda seen: bool(seen))) == ["exited"]


def test_a_delete_the_api_server_refuses_is_tried_again(make_runner, kubelet, api):
    runner = make_runner()
    runner.start(task(177), [])
    kubelet.run("default", "klique-177-0")
    answering = runner.api.delete_namespaced_pod

    def refused(*args, **kwargs):
        raise ApiException(status=503, reason="Service Unavailable")

    runner.api.delete_namespaced_pod = refused
    runner.terminate(177, 20)
    assert list(runner.retries) == [("pod", "default", "klique-177-0")]
    runner.api.delete_namespaced_pod = answering
    eventually(lambda: runner.poll() == [] and not runner.retries, what="the delete tried again")
    assert api.read_namespaced_pod("klique-177-0", "default").metadata.deletion_grace_period_seconds == 20


def test_an_unanswering_api_server_holds_a_stop_for_one_call_timeout_then_the_rest_wait_for_poll(
    make_runner, kubelet, monkeypatch
):
    """One slow API server cannot hold the daemon's thread (and its heartbeats) for more than a
    call's timeout per delete batch: after the first delete times out, the rest are kept to retry."""
    monkeypatch.setattr(deletes, "API_TIMEOUT_S", 0.5)
    runner = make_runner()
    runner.start(task(178, nodes=3), [])
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    held = []

    def accept():  # takes every connection, never answers
        while True:
            try:
                held.append(silent.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        stuck = make_runner(api=plain_client(f"http://127.0.0.1:{silent.getsockname()[1]}"))
        stuck.works[178] = runner.works.pop(178)
        stuck.kill(178)
        assert sorted(stuck.retries) == [
            ("pod", "default", "klique-178-0"),
            ("pod", "default", "klique-178-1"),
            ("pod", "default", "klique-178-2"),
            ("service", "default", "klique-178"),
        ]
        # One call, tried once (urllib3 alone would try it four times, each with the full timeout).
        assert len(held) == 1
    finally:
        silent.close()
        for connection in held:
            connection.close()


def test_a_pod_created_whose_answer_was_lost_is_deleted_before_the_task_is_handed_back(
    make_runner, cluster, api
):
    """The API server created the pod, then the connection dropped: the task goes back, and the
    pod (found by this worker's tag and the task, deleted by its uid) does not run on untracked."""

    class Dropping(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
            headers["Authorization"] = self.headers["Authorization"]
            httpx.post(
                cluster.server + self.path,
                content=body,
                headers=headers,
                verify=cluster.configuration.ssl_ca_cert,
            )
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

        def log_message(self, *args):
            pass

    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Dropping)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        runner = make_runner(tag="node-lost")
        through_proxy = client.CoreV1Api(cluster.worker(f"http://127.0.0.1:{proxy.server_address[1]}"))
        runner.api.create_namespaced_pod = through_proxy.create_namespaced_pod
        with pytest.raises(StartFailed) as failed:
            runner.start(task(179), [])
        assert not failed.value.recurs
        assert not api.list_namespaced_pod("default", label_selector="klique.io/task=179").items
    finally:
        proxy.shutdown()


def test_a_pod_created_whose_answer_was_lost_while_the_api_went_away_is_swept_from_poll(make_runner, api):
    runner = make_runner(tag="node-sweep")
    answering = runner.api.list_namespaced_pod
    created = {}

    def create_then_lose_the_answer(namespace, body, **kwargs):
        created["pod"] = api.create_namespaced_pod(namespace, body)
        runner.api.list_namespaced_pod = client.CoreV1Api(
            plain_client("http://127.0.0.1:1")
        ).list_namespaced_pod
        raise urllib3.exceptions.ProtocolError("Connection aborted.")

    runner.api.create_namespaced_pod = create_then_lose_the_answer
    with pytest.raises(StartFailed):
        runner.start(task(180), [])
    assert api.list_namespaced_pod("default", label_selector="klique.io/task=180").items
    runner.api.list_namespaced_pod = answering
    eventually(
        lambda: (
            runner.poll() == []
            and not api.list_namespaced_pod("default", label_selector="klique.io/task=180").items
        ),
        what="the sweep tried again",
    )


@pytest.mark.parametrize("nodes", [-1, 0, "2", 1.5, True])
def test_nodes_that_is_not_a_whole_number_of_at_least_one_is_a_recurring_start_failure(
    make_runner, api, nodes
):
    runner = make_runner()
    with pytest.raises(StartFailed) as failed:
        runner.start(task(181, nodes=nodes), [])
    assert failed.value.recurs and "nodes" in str(failed.value)
    assert runner.poll() == []
    assert not api.list_namespaced_pod("default", label_selector="klique.io/task=181").items


def test_a_daemon_stop_whose_pod_deletes_failed_still_ends_the_pod_once_the_api_answers(
    make_runner, kubelet, api
):
    """The daemon's stop (terminate, then kill once the grace is over) while the API server is
    unreachable: the pod must not run (and be charged) forever."""
    runner = make_runner(tag="node-stop")
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(182)]], heartbeat_s=1)
    settings = Settings(hostname="node-stop", enrolment_token="kqe_x", devices=["0"])
    daemon = Daemon(settings, control, runner, clock=clock, rng=random.Random(1))
    daemon.enrol()
    daemon.tick()
    kubelet.run("default", "klique-182-0")

    def started():
        daemon.tick()
        return any(kind == "started" for kind, _, _ in control.calls)

    eventually(started, what="started")
    answering = runner.api.delete_namespaced_pod
    runner.api.delete_namespaced_pod = client.CoreV1Api(
        plain_client("http://127.0.0.1:1")
    ).delete_namespaced_pod
    control.commands = [{"stop": 182, "reason": "preempted", "grace_s": 5}]
    clock.now += 2
    daemon.tick()  # the heartbeat's stop: terminate (its delete fails)
    clock.now += 10
    daemon.tick()  # the grace is over: kill (its delete fails)
    runner.api.delete_namespaced_pod = answering

    def pod_deleting():
        clock.now += 2
        daemon.tick()
        return api.read_namespaced_pod("klique-182-0", "default").metadata.deletion_timestamp

    eventually(pod_deleting, what="the stopped task's pod deleted")
    kubelet.finish_deletion("default", "klique-182-0")

    def reported():
        clock.now += 2
        daemon.tick()
        return any(kind == "stopped" for kind, _, _ in control.calls)

    eventually(reported, what="the stop reported")
