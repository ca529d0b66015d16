"""Rule 1 (time limits) and rule 5 (arrays) in Kubernetes mode, on the real API server of
tests/kube.py as the worker's ServiceAccount: a limited task's pod is stored with
``activeDeadlineSeconds`` (its limit plus the pending timeout: a backstop, since the kubelet counts
image pulls too) and its ``KLIQUE_TIME_LIMIT_S`` / ``KLIQUE_ARRAY_INDEX``; the daemon deletes the
pods at the limit of running time (KWOK runs no containers: the hand-played kubelet ends them), and
a pod failed at its deadline (DeadlineExceeded) is reported as an exit that timed out."""

import random

from klique.worker.daemon import Daemon, Settings
from tests.worker import test_kubernetes_runner as k8s_tests
from tests.worker.fakes import Clock, ScriptedControlPlane
from tests.worker.k8s import eventually, now
from tests.worker.test_kubernetes_runner import changes_until, env_of, kinds, task

api, cluster, kubelet, make_runner = (
    k8s_tests.api,
    k8s_tests.cluster,
    k8s_tests.kubelet,
    k8s_tests.make_runner,
)


def limited(task_id: int, limit: int | None, **fields) -> dict:
    return {**task(task_id), "time_limit_s": limit, **fields}


def test_time_limit_the_stored_pod_has_an_active_deadline_and_the_limit_and_index_in_its_env(
    make_runner, api
):
    runner = make_runner(pending_timeout_s=120)
    runner.start(limited(401, 3600, array_index=5), [])
    runner.start(limited(402, None), [])
    runner.start(limited(405, 2**31 - 1), [])  # the longest limit a task may have
    pod = api.read_namespaced_pod("klique-401-0", "default")
    assert pod.spec.active_deadline_seconds == 3600 + 120
    env = env_of(pod)
    assert env["KLIQUE_TIME_LIMIT_S"] == "3600" and env["KLIQUE_ARRAY_INDEX"] == "5"
    assert api.read_namespaced_pod("klique-405-0", "default").spec.active_deadline_seconds == 2**31 - 1
    plain = api.read_namespaced_pod("klique-402-0", "default")
    assert plain.spec.active_deadline_seconds is None and "KLIQUE_TIME_LIMIT_S" not in env_of(plain)


def test_time_limit_a_pod_failed_at_its_deadline_is_reported_as_an_exit_that_timed_out(make_runner, kubelet):
    runner = make_runner()
    runner.start(limited(403, 60), [])
    kubelet.run("default", "klique-403-0")
    changes_until(runner, lambda seen: "running" in kinds(seen))
    ended = {"exitCode": 137, "reason": "Error", "startedAt": now(), "finishedAt": now()}
    container = {"name": "task", "ready": False, "restartCount": 0, "image": "", "imageID": ""}
    kubelet.status(
        "default",
        "klique-403-0",
        {
            "phase": "Failed",
            "reason": "DeadlineExceeded",
            "message": "Pod was active on the node longer than the specified deadline",
            "containerStatuses": [{**container, "state": {"terminated": ended}}],
        },
    )
    seen = changes_until(runner, lambda seen: "exited" in kinds(seen))
    [exited] = [change for change in seen if change.kind == "exited"]
    assert (exited.exit_code, exited.timed_out) == (137, True)


def test_time_limit_the_daemon_deletes_the_pods_at_the_limit_and_reports_an_exit_that_timed_out(
    make_runner, kubelet, api
):
    runner = make_runner(tag="node-limit")
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[limited(404, 30)]], heartbeat_s=1)
    settings = Settings(hostname="node-limit", enrolment_token="kqe_x", devices=["0"])
    daemon = Daemon(settings, control, runner, clock=clock, rng=random.Random(1))
    daemon.enrol()
    daemon.tick()
    kubelet.run("default", "klique-404-0")

    def started():
        daemon.tick()
        return any(kind == "started" for kind, _, _ in control.calls)

    eventually(started, what="started")
    clock.now += 29
    daemon.tick()
    assert api.read_namespaced_pod("klique-404-0", "default").metadata.deletion_timestamp is None
    clock.now += 2
    daemon.tick()  # the limit: the pods are deleted with the task's grace (the kubelet's SIGTERM)
    pod = api.read_namespaced_pod("klique-404-0", "default")
    assert pod.metadata.deletion_timestamp is not None and pod.metadata.deletion_grace_period_seconds == 20
    kubelet.finish_deletion("default", "klique-404-0")

    def reported():
        daemon.tick()
        return [body for kind, _, body in control.calls if kind == "exited"]

    [sent] = eventually(reported, what="the exit report")
    assert (sent["exit_code"], sent["timed_out"]) == (143, True)
