"""The Helm chart installed for real: Helm's own library (deploy/k8s-dev/helm_release.py) installs
deploy/helm/klique into the real control plane of tests/kube.py, whose API server validates every
object; the migrate hook's Job and the Deployments' pods are scheduled onto KWOK's nodes and run
(KWOK neither pulls images nor runs them); an upgrade with changed values applies; an uninstall
leaves nothing of the release behind."""

import json
import subprocess

import pytest
import yaml

from tests.deploy.test_artefacts import DEPLOY, tools_python
from tests.worker.k8s import eventually

RELEASE, NAMESPACE = "klique", "klique-helm"
VALUES = DEPLOY / "helm" / "klique" / "ci" / "test-values.yaml"
KINDS = ",".join(
    ["deployments", "replicasets", "pods", "jobs", "services", "configmaps", "secrets"]
    + ["serviceaccounts", "roles", "rolebindings", "ingresses", "poddisruptionbudgets", "networkpolicies"]
)


@pytest.fixture(scope="module")
def helm(kube_cluster, tmp_path_factory):
    python = tools_python()
    folder = tmp_path_factory.mktemp("helm")

    def run(action: str, values: dict | None = None) -> dict:
        extra = folder / f"{action}.json"
        extra.write_text(json.dumps(values or {}))
        done = subprocess.run(
            [python, DEPLOY / "k8s-dev" / "helm_release.py", action, str(kube_cluster.kubeconfig), NAMESPACE,
             RELEASE, str(VALUES), str(extra), "--timeout", "240"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads(done.stdout)

    # The chart binds a Role in each worker pool's task namespace: IT creates those namespaces.
    for pool in yaml.safe_load(VALUES.read_text())["workerPools"]:
        if pool.get("taskNamespace"):
            kube_cluster.namespace(pool["taskNamespace"])
    return run


def objects(kube_cluster, kinds=KINDS, namespace=NAMESPACE) -> list[dict]:
    listed = kube_cluster.kubectl(
        "get", kinds, "-n", namespace, "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "json"
    )
    return json.loads(listed)["items"]


def named(items, kind) -> dict:
    return {item["metadata"]["name"]: item for item in items if item["kind"] == kind}


def test_the_chart_installs_upgrades_and_uninstalls_on_a_real_api_server(helm, kube_cluster):
    installed = helm("install")
    assert (installed["status"], installed["revision"]) == ("deployed", 1)

    items = objects(kube_cluster)
    deployments = named(items, "Deployment")
    assert set(deployments) == {
        "klique-web", "klique-celery", "klique-whatif", "klique-beat", "klique-gateway",
        "klique-worker-gpu-cluster-1", "klique-worker-gpu-cluster-2",
    }  # fmt: skip
    for name, deployment in deployments.items():  # helm waited: every replica scheduled and ready
        assert deployment["status"].get("readyReplicas") == deployment["spec"]["replicas"], name
    for pod in named(items, "Pod").values():
        assert pod["spec"]["nodeName"] and pod["status"]["phase"] == "Running"
    # Config and Secret are release objects, not hooks; the migrate hook and its copies are gone
    # once it succeeded (its pod ran to completion on a KWOK node).
    for kind in ("ConfigMap", "Secret"):
        config = named(items, kind)["klique"]
        assert "helm.sh/hook" not in (config["metadata"].get("annotations") or {})
    assert not named(items, "Job") and "klique-migrate" not in named(items, "ConfigMap")
    events = kube_cluster.kubectl("get", "events", "-n", NAMESPACE, "-o", "json")
    reasons = {(e["involvedObject"]["kind"], e["reason"]) for e in json.loads(events)["items"]}
    assert ("Job", "Completed") in reasons, reasons
    # Every workload has a probe.
    for name, deployment in deployments.items():
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container.get("livenessProbe"), name

    upgraded = helm("upgrade", {"web": {"replicas": 3}, "config": {"LOW_WATERMARK_S": 600}})
    assert (upgraded["status"], upgraded["revision"]) == ("deployed", 2)
    items = objects(kube_cluster)
    assert named(items, "Deployment")["klique-web"]["status"]["readyReplicas"] == 3
    assert named(items, "ConfigMap")["klique"]["data"]["LOW_WATERMARK_S"] == "600"

    helm("uninstall")
    eventually(lambda: not objects(kube_cluster), timeout=120, what="every object of the release removed")
    assert not objects(kube_cluster, "roles,rolebindings", "ml-jobs")
    cluster_wide = kube_cluster.kubectl(
        "get", "clusterroles,clusterrolebindings", "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name"
    )
    assert cluster_wide.strip() == ""
    releases = kube_cluster.kubectl("get", "secrets", "-n", NAMESPACE, "-l", "owner=helm", "-o", "name")
    assert releases.strip() == ""
