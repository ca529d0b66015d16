"""Kubernetes mode on the real stack: PostgreSQL, the live server, the engine loop and a
``klique-worker --mode kubernetes`` process reading a kubeconfig of the worker's ServiceAccount,
against the real control plane (tests/kube.py: kube-scheduler binds, KWOK runs the pod). A daemon
restarted with its work left running re-adopts the pod: the task keeps running on one usage
interval, then succeeds."""

import httpx
import pytest
from django.utils import timezone

from apps.accounts import services as accounts
from apps.accounts.models import Membership
from apps.ledger.models import UsageInterval
from apps.policies import services as policies
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken, Pool, Worker
from apps.tasks.models import Task
from tests.factories import GpuTypeFactory, GroupFactory, UserFactory
from tests.worker import live
from tests.worker.k8s import Kubelet, exit_with

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture
def stack(settings, tmp_path, live_server, kube_cluster):
    settings.WORKER_HEARTBEAT_S = 0.5
    settings.WORKER_HEARTBEAT_TIMEOUT_S = 5
    settings.WORKER_STOP_GRACE_S = 5
    pool = Pool.objects.create(
        name="cluster",
        kind=Pool.Kind.KUBERNETES,
        gpu_type=GpuTypeFactory(),
        capacity=4,
        namespace=kube_cluster.namespace("live"),
    )
    profile = policies.create_profile(name="1gpu", gpus=1, pools=[pool])
    profile.image = "pytorch/pytorch:2.4.0"
    profile.save()
    group = GroupFactory(name="Vision", slug="vision")
    policy = policies.create_policy(group=group, reservation=1, limit=4)
    resource = policies.connect(policy=policy, profile=profile, name="vision-1gpu")
    user = UserFactory(username="ada")
    accounts.add_membership(user=user, group=group, role=Membership.Role.MEMBER)
    api_token = accounts.create_api_token(user=user, name="e2e")[1]
    enrolment = pools.issue_enrolment_token(EnrolmentToken(pool=pool, name="k8s"), now=timezone.now())
    config = kube_cluster.worker_kubeconfig(tmp_path / "kubeconfig")
    processes = []

    class Stack:
        def __init__(self):
            self.api, self.folder = kube_cluster.core, tmp_path
            self.kubelet = Kubelet(kube_cluster, tmp_path)

        def submit(self, command: str) -> int:
            answer = httpx.post(
                f"{live_server.url}/api/v1/tasks/",
                json={"compute_resource": resource.name, "command": command},
                headers={"Authorization": f"Bearer {api_token}"},
                timeout=30,
            )
            assert answer.status_code == 201, answer.text
            return answer.json()["id"]

        def engine(self) -> live.Process:
            processes.append(live.engine(tmp_path / "engine.log", 0.5))
            return processes[-1]

        def worker(self, log: str) -> live.Process:
            args = [live.WORKER, "--server", live_server.url, "--mode", "kubernetes", "--gpus", "4"]
            args += ["--hostname", "gpu-cluster-1", "--state-dir", str(tmp_path / "state")]
            args += ["--poll-min", "0.2", "--poll-max", "1", "--retry-max", "1", "--tick", "0.1"]
            env = live.stack_env(
                KLIQUE_ENROLMENT_TOKEN=enrolment,
                KLIQUE_KUBE_CONFIG=str(config),
                KLIQUE_KUBE_NAMESPACE="default",
                KLIQUE_WORKER_KEEP_WORK_ON_EXIT="1",
            )
            processes.append(live.Process(args, env, tmp_path / log))
            return processes[-1]

    yield Stack()
    for process in reversed(processes):
        process.stop()
    live.other_sessions_closed()


def test_the_kubernetes_daemon_runs_a_pod_and_after_a_restart_re_adopts_it_on_one_interval(stack):
    stack.engine()
    first = stack.worker("first.log")
    pk = stack.submit("python train.py")
    live.wait_for(lambda: Task.objects.get(pk=pk).state == "running", what="the task running")
    pod = stack.api.read_namespaced_pod(f"klique-{pk}-0", "live")
    assert pod.metadata.labels["klique.io/worker"] == "gpu-cluster-1"
    assert pod.spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"}

    worker = Worker.objects.get(state="active").pk
    assert first.stop() == 0  # SIGTERM with KLIQUE_WORKER_KEEP_WORK_ON_EXIT: the pod stays
    assert stack.api.read_namespaced_pod(f"klique-{pk}-0", "live").metadata.deletion_timestamp is None
    second = stack.worker("second.log")
    # Re-enrolment retires the first worker and moves or requeues its tasks at once; then heartbeats.
    live.wait_for(
        lambda: (
            Worker.objects.filter(state="active", last_heartbeat__isnull=False).exclude(pk=worker).exists()
        ),
        what="the second daemon enrolled and heartbeating",
    )
    task = Task.objects.get(pk=pk)
    assert task.state == "running" and task.preemption_count == 0, first.output() + second.output()
    # Enrolment itself marks the worker alive, so the daemon may log its adoption a moment later.
    live.wait_for(
        lambda: f"adopted work left running tasks=[{pk}]" in second.output(),
        what="the second daemon's adoption in its log",
    )

    stack.kubelet.write_log("live", f"klique-{pk}-0", "training\nsaved\n")
    exit_with(stack.api, "live", f"klique-{pk}-0", 0)
    live.wait_for(lambda: Task.objects.get(pk=pk).state == "succeeded", what="the task succeeded")
    done = Task.objects.get(pk=pk)
    assert done.exit_code == 0 and done.log.tail.endswith("saved\n")
    assert "requeued" not in done.events.values_list("kind", flat=True)
    (interval,) = UsageInterval.objects.filter(task_id=pk)
    assert interval.end is not None
    live.wait_for(
        lambda: not stack.api.list_namespaced_pod("live", label_selector=f"klique.io/task={pk}").items,
        what="the ended pod deleted",
    )
