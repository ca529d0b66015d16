"""Kubernetes mode end to end: a task submitted through the API is placed by the engine, claimed
by a daemon in Kubernetes mode, run as a pod on the k8s-dev API server (a fake kubelet acting
through the API), preempted with the profile's grace (pod deleted, kubelet ends it), requeued,
run again to success; the usage ledger shows both runs."""

import pytest
from django.utils import timezone
from kubernetes import client

from apps.engine import services as engine
from apps.ledger.models import UsageInterval
from apps.pools import services
from apps.pools.models import EnrolmentToken
from apps.tasks import services as lifecycle
from apps.tasks.models import Task
from klique.worker.client import ControlPlane
from klique.worker.daemon import Daemon, Settings
from klique.worker.kubernetes import KubernetesRunner
from tests.worker.conftest import run_until, submit
from tests.worker.k8s import Kubelet, api_client, start_apiserver

pytestmark = pytest.mark.django_db


class AutoKubelet(Kubelet):
    """Each tick: run the pods bound to no node, end the pods being deleted (SIGTERM: 143)."""

    def __init__(self, url: str):
        super().__init__(url)
        self.graces: dict[str, int] = {}

    def tick(self) -> None:
        for pod in self.api.list_pod_for_all_namespaces(label_selector="klique.io/worker").items:
            namespace, name = pod.metadata.namespace, pod.metadata.name
            if pod.metadata.deletion_timestamp is not None:
                self.graces[name] = pod.metadata.deletion_grace_period_seconds
                self.write_log(namespace, name, "epoch 1\nSIGTERM: saving a checkpoint\n")
                self.finish_deletion(namespace, name)
            elif not pod.spec.node_name:
                self.run(namespace, name)
                self.write_log(namespace, name, "epoch 1\n")


@pytest.fixture
def server():
    apiserver = start_apiserver(bookmark_s=0.5)
    yield apiserver
    apiserver.shutdown()


def test_a_submitted_task_runs_as_a_pod_is_preempted_with_its_grace_requeued_and_charged_per_run(
    pool, network, fast, estate, server
):
    pool.namespace, pool.namespace_per_group = "ml", True
    pool.save()
    resource, token = estate
    resource.profile.image = "pytorch/pytorch:2.4.0"
    resource.profile.stop_grace_s = 25
    resource.profile.save()
    raw = services.issue_enrolment_token(EnrolmentToken(pool=pool, name="k8s"), now=timezone.now())
    runner = KubernetesRunner(api_client(server.url), tag="gpu-cluster-1", namespace="default")
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
    kubelet = AutoKubelet(server.url)
    api = client.CoreV1Api(api_client(server.url))
    try:
        daemon.enrol()
        pk = submit(token, resource, "python train.py --resume")
        engine.run_pass()
        run_until([daemon, kubelet], lambda: Task.objects.get(pk=pk).state == Task.State.RUNNING)
        pod = api.read_namespaced_pod(f"klique-{pk}-0", "ml-vision")
        assert pod.metadata.labels["klique.io/group"] == "vision"
        assert pod.metadata.labels["klique.io/user"] == "ada"
        assert pod.spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"}
        assert pod.spec.containers[0].image == "pytorch/pytorch:2.4.0"

        lifecycle.request_stop_many([Task.objects.get(pk=pk)], Task.StopReason.RECLAIM, timezone.now())
        run_until([daemon, kubelet], lambda: Task.objects.get(pk=pk).state == Task.State.QUEUED)
        assert kubelet.graces[f"klique-{pk}-0"] == 25
        preempted = Task.objects.get(pk=pk)
        assert preempted.preemption_count == 1 and preempted.last_preemption_reason == "reclaim"
        assert preempted.log.tail.startswith("epoch 1\n")

        engine.run_pass()
        run_until([daemon, kubelet], lambda: Task.objects.get(pk=pk).state == Task.State.RUNNING)
        kubelet.write_log("ml-vision", f"klique-{pk}-0", "resumed\ndone\n")
        kubelet.exit("ml-vision", f"klique-{pk}-0", 0)
        run_until([daemon, kubelet], lambda: Task.objects.get(pk=pk).state == Task.State.SUCCEEDED)
        done = Task.objects.get(pk=pk)
        assert done.exit_code == 0 and done.log.tail.endswith("resumed\ndone\n")
        kinds = list(done.events.order_by("pk").values_list("kind", flat=True))
        assert kinds == [
            "submitted", "placed", "claimed", "started", "preempted", "requeued",
            "placed", "claimed", "started", "succeeded",
        ]  # fmt: skip
        intervals = list(UsageInterval.objects.filter(task_id=pk).order_by("start"))
        assert len(intervals) == 2 and all(interval.end is not None for interval in intervals)
        assert not api.list_namespaced_pod("ml-vision", label_selector=f"klique.io/task={pk}").items
    finally:
        runner.close()
