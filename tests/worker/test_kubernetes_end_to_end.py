"""Kubernetes mode end to end on the real control plane (tests/kube.py): a task submitted through
the API is placed by the engine, claimed by a daemon in Kubernetes mode (the worker's
ServiceAccount), its pod bound to a KWOK GPU node by kube-scheduler and run by KWOK, preempted with
the profile's grace (the pod deleted, SIGTERM ends it), requeued, run again to success; the usage
ledger shows both runs."""

import pytest
from django.utils import timezone

from apps.engine import services as engine
from apps.ledger.models import UsageInterval
from apps.pools import services
from apps.pools.models import EnrolmentToken
from apps.tasks import services as lifecycle
from apps.tasks.models import Task
from klique.worker.client import ControlPlane
from klique.worker.daemon import Daemon, Settings
from klique.worker.kubernetes.runner import KubernetesRunner
from tests.worker.conftest import run_until, submit
from tests.worker.k8s import Kubelet, eventually, exit_with, stop_takes

pytestmark = pytest.mark.django_db


def test_a_submitted_task_runs_as_a_pod_is_preempted_with_its_grace_requeued_and_charged_per_run(
    pool, network, fast, estate, kube_cluster, tmp_path
):
    kube_cluster.namespace("e2e-vision")
    pool.namespace, pool.namespace_per_group = "e2e", True
    pool.save()
    resource, token = estate
    resource.profile.image = "pytorch/pytorch:2.4.0"
    resource.profile.stop_grace_s = 25
    resource.profile.save()
    raw = services.issue_enrolment_token(EnrolmentToken(pool=pool, name="k8s"), now=timezone.now())
    runner = KubernetesRunner(kube_cluster.worker(), tag="gpu-cluster-1", namespace="default")
    settings = Settings(
        hostname="gpu-cluster-1",
        enrolment_token=raw,
        devices=[str(i) for i in range(4)],
        poll_min_s=0.05,
        poll_max_s=0.2,
        retry_max_s=0.5,
        tick_s=0.02,
    )
    daemon = Daemon(settings, ControlPlane("http://testserver", transport=network), runner)
    kubelet, api = Kubelet(kube_cluster, tmp_path), kube_cluster.core
    try:
        daemon.enrol()
        pk = submit(token, resource, "python train.py --resume")
        engine.run_pass()
        run_until([daemon], lambda: Task.objects.get(pk=pk).state == Task.State.RUNNING)
        namespace, name = "e2e-vision", f"klique-{pk}-0"
        pod = api.read_namespaced_pod(name, namespace)
        assert pod.spec.node_name in ("gpu-node-1", "gpu-node-2")  # bound by kube-scheduler
        assert pod.status.phase == "Running"  # run by KWOK
        assert pod.metadata.labels["klique.io/group"] == "vision"
        assert pod.metadata.labels["klique.io/user"] == "ada"
        assert pod.spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"}
        assert pod.spec.containers[0].image == "pytorch/pytorch:2.4.0"
        kubelet.write_log(namespace, name, "epoch 1\n")
        stop_takes(api, namespace, name, 2000)

        lifecycle.request_stop_many([Task.objects.get(pk=pk)], Task.StopReason.RECLAIM, timezone.now())
        run_until([daemon], lambda: api.read_namespaced_pod(name, namespace).metadata.deletion_timestamp)
        assert api.read_namespaced_pod(name, namespace).metadata.deletion_grace_period_seconds == 25
        run_until([daemon], lambda: Task.objects.get(pk=pk).state == Task.State.QUEUED)
        preempted = Task.objects.get(pk=pk)
        assert preempted.preemption_count == 1 and preempted.last_preemption_reason == "reclaim"
        assert preempted.log.tail.startswith("epoch 1\n")
        assert preempted.exit_code in (None, 143)
        eventually(
            lambda: not api.list_namespaced_pod(namespace, label_selector=f"klique.io/task={pk}").items
        )

        engine.run_pass()
        run_until([daemon], lambda: Task.objects.get(pk=pk).state == Task.State.RUNNING)
        kubelet.write_log(namespace, name, "resumed\ndone\n")
        exit_with(api, namespace, name, 0)
        run_until([daemon], lambda: Task.objects.get(pk=pk).state == Task.State.SUCCEEDED)
        done = Task.objects.get(pk=pk)
        assert done.exit_code == 0 and done.log.tail.endswith("resumed\ndone\n")
        kinds = list(done.events.order_by("pk").values_list("kind", flat=True))
        assert kinds == [
            "submitted", "placed", "claimed", "started", "preempted", "requeued",
            "placed", "claimed", "started", "succeeded",
        ]  # fmt: skip
        intervals = list(UsageInterval.objects.filter(task_id=pk).order_by("start"))
        assert len(intervals) == 2 and all(interval.end is not None for interval in intervals)
        eventually(
            lambda: not api.list_namespaced_pod(namespace, label_selector=f"klique.io/task={pk}").items
        )
    finally:
        runner.close()
