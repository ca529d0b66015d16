"""The install artefacts of deploy/ (docs/deploy.md): the nginx sites pass ``nginx -t``, the systemd
units pass ``systemd-analyze verify`` and are hardened, the compose file's references hold, the Helm
chart lints, renders and validates against the Kubernetes 1.30 schemas, and the timeouts of nginx,
gunicorn and the worker long poll agree. A test skips only when its tool is not installed; the
slow image builds are ``deploy/check.sh --images``."""

import configparser
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.conf import settings

from klique.settings.base import BASE_DIR
from tests.conftest import _fail_or_skip

DEPLOY = BASE_DIR / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def need(tool: str) -> str:
    found = shutil.which(tool)
    if not found:
        _fail_or_skip(f"{tool} is not installed (apt-get install it; CI's .ci/run does)")
    return found


# --- nginx ---------------------------------------------------------------------------------------


def nginx_tree(tmp_path: Path, site: str, locations: str | None = None) -> Path:
    """The site in a throwaway nginx.conf, with a self-signed certificate; returns nginx.conf."""
    for folder in ("snippets", "ssl", "static", "log"):
        (tmp_path / folder).mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + [
            "-subj",
            "/CN=klique.example.org",
            "-keyout",
            tmp_path / "ssl/tls.key",
            "-out",
            tmp_path / "ssl/tls.crt",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    text = (DEPLOY / "nginx" / f"{site}.conf").read_text()
    for old, new in {
        "/etc/nginx/snippets/": f"{tmp_path}/snippets/",
        "/etc/ssl/klique/": f"{tmp_path}/ssl/",
        "/var/log/nginx/": f"{tmp_path}/log/",
        "server web:8000": "server 127.0.0.1:8000",  # compose's service name resolves only there
        "server gateway:8001": "server 127.0.0.1:8001",
    }.items():
        text = text.replace(old, new)
    (tmp_path / "site.conf").write_text(text)
    locations = locations or (DEPLOY / "nginx" / "klique-locations.conf").read_text()
    (tmp_path / "snippets/klique-locations.conf").write_text(
        locations.replace("/opt/klique/staticfiles/", f"{tmp_path}/static/")
    )
    temp = " ".join(f"{kind}_temp_path {tmp_path}/{kind};" for kind in ("client_body", "proxy", "fastcgi"))
    temp += f" uwsgi_temp_path {tmp_path}/uwsgi; scgi_temp_path {tmp_path}/scgi;"
    conf = tmp_path / "nginx.conf"
    conf.write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/log/error.log;\nevents {{}}\n"
        f"http {{\n include /etc/nginx/mime.types;\n access_log off;\n {temp}\n"
        f" include {tmp_path}/site.conf;\n}}\n"
    )
    return conf


@pytest.mark.parametrize("site", ["klique", "compose"])
def test_nginx_t_accepts_the_site(tmp_path, site):
    nginx = need("nginx")
    need("openssl")
    done = subprocess.run(
        [nginx, "-t", "-c", nginx_tree(tmp_path, site)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert "test is successful" in done.stderr


def test_nginx_t_refuses_a_broken_site(tmp_path):
    """The check bites: a misspelt directive in the shared locations fails nginx -t."""
    nginx = need("nginx")
    need("openssl")
    broken = (
        (DEPLOY / "nginx" / "klique-locations.conf")
        .read_text()
        .replace("proxy_read_timeout", "proxy_red_timeout")
    )
    done = subprocess.run(
        [nginx, "-t", "-c", nginx_tree(tmp_path, "klique", broken)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert "proxy_red_timeout" in done.stderr


def directive(name: str) -> str:
    """The shared locations' top-level value of ``name`` (the session gateway's locations set their own)."""
    found = re.findall(rf"^{name}\s+([^;]+);", (DEPLOY / "nginx" / "klique-locations.conf").read_text(), re.M)
    assert len(found) == 1, (name, found)
    return found[0]


def test_proxy_headers_and_limits_production_relies_on():
    text = (DEPLOY / "nginx" / "klique-locations.conf").read_text()
    # SECURE_PROXY_SSL_HEADER in klique/settings/production.py
    header = settings_production_proxy_header()
    assert header == ("HTTP_X_FORWARDED_PROTO", "https")
    assert "proxy_set_header X-Forwarded-Proto $scheme;" in text
    assert "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;" in text
    assert "proxy_set_header Host $http_host;" in text
    assert directive("client_max_body_size") == "10m"
    assert "alias /opt/klique/staticfiles/;" in text
    # the VM units run from /opt/klique, whose STATIC_ROOT default is /opt/klique/staticfiles
    assert "WorkingDirectory=/opt/klique" in (DEPLOY / "systemd" / "klique-web.service").read_text()


def settings_production_proxy_header() -> tuple[str, str]:
    source = (BASE_DIR / "klique" / "settings" / "production.py").read_text()
    match = re.search(r'^SECURE_PROXY_SSL_HEADER = \("(\w+)", "(\w+)"\)', source, re.M)
    assert match, "production.py sets SECURE_PROXY_SSL_HEADER"
    return match.group(1), match.group(2)


def test_timeouts_of_nginx_gunicorn_and_the_ingress_agree_and_outlast_the_worker_long_poll():
    nginx_read = int(directive("proxy_read_timeout").rstrip("s"))
    entrypoint = (DEPLOY / "docker" / "docker-entrypoint.sh").read_text()
    gunicorn = int(re.search(r'--timeout "\$\{WEB_TIMEOUT:-(\d+)\}"', entrypoint).group(1))
    unit = int(
        re.search(r"WEB_TIMEOUT=(\d+)", (DEPLOY / "systemd" / "klique-web.service").read_text()).group(1)
    )
    values = yaml.safe_load((DEPLOY / "helm" / "klique" / "values.yaml").read_text())
    ingress = int(values["ingress"]["annotations"]["nginx.ingress.kubernetes.io/proxy-read-timeout"])
    assert nginx_read == gunicorn == unit == values["web"]["timeout"] == ingress == 60
    assert nginx_read > 2 * settings.WORKER_WAIT_MAX_S


# --- systemd -------------------------------------------------------------------------------------


def unit_config(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read_string(path.read_text())
    return parser


def verify(tmp_path: Path, units: dict[str, str]) -> subprocess.CompletedProcess:
    """systemd-analyze verify on copies whose /opt/klique programs are stubs in tmp_path."""
    for program in (
        "opt/klique/.venv/bin/gunicorn",
        "opt/klique/.venv/bin/celery",
        "opt/klique/.venv/bin/klique-gateway",
        "opt/klique-worker/bin/klique-worker",
    ):
        stub = tmp_path / program
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text("#!/bin/sh\n")
        stub.chmod(0o755)
    names = []
    for name, text in units.items():
        name = name.replace("@.service", "@pool1.service")
        (tmp_path / name).write_text(text.replace("/opt/klique", f"{tmp_path}/opt/klique"))
        names.append(name)
    return subprocess.run(
        ["systemd-analyze", "verify", *names], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )


def test_systemd_analyze_verify_finds_nothing(tmp_path):
    need("systemd-analyze")
    done = verify(tmp_path, {unit.name: unit.read_text() for unit in UNITS})
    # verify exits 0 on unknown keys and bad values: any message at all is a failure
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_systemd_analyze_verify_reports_a_misspelt_key(tmp_path):
    need("systemd-analyze")
    text = (
        (DEPLOY / "systemd" / "klique-beat.service").read_text().replace("Restart=always", "Restrat=always")
    )
    done = verify(tmp_path, {"klique-beat.service": text})
    assert "Unknown key 'Restrat'" in done.stderr


def test_the_units_cover_every_process_restart_and_are_hardened():
    assert {unit.name for unit in UNITS} == {
        "klique-web.service",
        "klique-celery.service",
        "klique-whatif.service",
        "klique-beat.service",
        "klique-gateway.service",
        "klique-worker@.service",
    }
    for unit in UNITS:
        service = unit_config(unit)["Service"]
        assert service["Restart"] == "always", unit.name
        assert service["EnvironmentFile"].startswith("/etc/klique/"), unit.name
        assert service["User"] not in {"", "root"}, unit.name
        for key, value in {
            "NoNewPrivileges": "yes",
            "ProtectSystem": "strict",
            "ProtectHome": "yes",
            "PrivateTmp": "yes",
            "ProtectKernelTunables": "yes",
            "ProtectControlGroups": "yes",
        }.items():
            assert service.get(key) == value, (unit.name, key)
        assert service.get("ReadWritePaths"), unit.name
    # the control plane's units also lose every capability and non-service system call
    for unit in UNITS:
        if unit.name != "klique-worker@.service":
            service = unit_config(unit)["Service"]
            assert service["CapabilityBoundingSet"] == "" and service["SystemCallFilter"] == "@system-service"


def queues_in(text: str) -> set[str]:
    """The queues given to -Q, directly or as the default or value of CELERY_QUEUES."""
    found = re.findall(r'-Q "?(?:\$\{\w+:-)?([a-z][\w,]*)', text) + re.findall(
        r"CELERY_QUEUES=([\w,]+)", text
    )
    return {queue for group in found for queue in group.split(",")}


def test_the_procfile_queues_are_the_units_and_the_images():
    """Every Celery queue deploy/Procfile consumes has a consumer in the units and the image."""
    procfile = queues_in((DEPLOY / "Procfile").read_text())
    assert {"engine", "meter", "whatif", "celery"} <= procfile
    assert queues_in(" ".join(unit.read_text() for unit in UNITS)) == procfile
    assert queues_in((DEPLOY / "docker" / "docker-entrypoint.sh").read_text()) == procfile


# --- compose -------------------------------------------------------------------------------------


def test_compose_references_hold_together():
    problems, services = load(DEPLOY / "check_compose.py").problems()
    assert problems == []
    assert {"postgres", "redis", "migrate", "web", "worker", "beat", "nginx", "demo-worker"} <= set(services)
    assert services["demo-worker"]["profiles"] == ["demo"]


def test_compose_config_passes_docker_compose_schema(tmp_path):
    docker_compose = need("docker-compose")
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    shutil.copy(DEPLOY / "compose.env.example", tmp_path / "deploy" / "compose.env")
    # Debian's docker-compose 1.29 predates the top-level "name"
    text = (DEPLOY / "compose.yaml").read_text()
    (tmp_path / "deploy" / "compose.v1.yaml").write_text(re.sub(r"^name: .*\n", "", text, flags=re.M))
    done = subprocess.run(
        [docker_compose, "-f", "deploy/compose.v1.yaml", "--profile", "demo", "config", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_the_env_example_names_what_production_refuses_to_start_without():
    source = (BASE_DIR / "klique" / "settings" / "production.py").read_text()
    refused = set(re.findall(r'raise ImproperlyConfigured\("(\w+) must', source))
    assert refused == {"SECRET_KEY", "DEBUG", "ALLOWED_HOSTS"}
    example = (DEPLOY / "compose.env.example").read_text()
    assert re.search(r"^SECRET_KEY=.{32,}$", example, re.M)
    assert re.search(r"^ALLOWED_HOSTS=\S+", example, re.M)
    assert not re.search(r"^DEBUG=", example, re.M)


# --- Helm and Kubernetes -------------------------------------------------------------------------


def tools_python() -> str:
    """A Python with helm-python-sdk and kubernetes-validate: this one, or deploy/check.sh's venv."""
    candidates = [
        sys.executable,
        str(Path(os.environ.get("KLIQUE_DEPLOY_TOOLS", "/tmp/klique-deploy-tools")) / "bin/python"),
    ]
    for python in candidates:
        if Path(python).exists():
            probe = subprocess.run(
                [python, "-c", "import helm_python, kubernetes_validate"], capture_output=True, timeout=60
            )
            if probe.returncode == 0:
                return python
    _fail_or_skip(
        "helm-python-sdk and kubernetes-validate are not installed: deploy/check.sh installs them into "
        "$KLIQUE_DEPLOY_TOOLS (/tmp/klique-deploy-tools)"
    )


def render(out: Path, **values) -> dict:
    """The chart rendered with the test values (and ``values`` over them), linted and validated."""
    done = subprocess.run(
        [tools_python(), DEPLOY / "check_manifests.py", "--kube-version", "1.30.0", "--out", out]
        + ["--set-json", json.dumps(values)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    docs = [doc for doc in yaml.safe_load_all((out / "chart.yaml").read_text()) if doc]
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    return render(tmp_path_factory.mktemp("chart"))


def test_the_chart_lints_renders_and_validates_against_kubernetes_1_30(rendered):
    assert ("Deployment", "klique-web") in rendered


def container(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]["containers"][0]


def test_the_web_deployment_probes_health_and_readiness(rendered):
    web = container(rendered[("Deployment", "klique-web")])
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert web["securityContext"]["readOnlyRootFilesystem"] is True
    assert rendered[("Service", "klique-web")]["spec"]["ports"][0]["targetPort"] == "http"
    ingress = rendered[("Ingress", "klique")]["spec"]
    assert ingress["rules"][0]["host"] == "klique.test.example" and ingress["tls"][0]["secretName"]


def test_one_beat_and_migrate_before_install_and_upgrade(rendered):
    beat = rendered[("Deployment", "klique-beat")]["spec"]
    assert (beat["replicas"], beat["strategy"]["type"]) == (1, "Recreate")
    job = rendered[("Job", "klique-migrate")]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert container(job)["args"] == ["migrate"]
    # The release's settings are ordinary objects (never recreated under running pods); the hook Job
    # reads copies made before it (lower weight) and removed once it succeeded.
    for kind in ("ConfigMap", "Secret"):
        assert "helm.sh/hook" not in (rendered[(kind, "klique")]["metadata"].get("annotations") or {})
        annotations = rendered[(kind, "klique-migrate")]["metadata"]["annotations"]
        assert int(annotations["helm.sh/hook-weight"]) < int(
            job["metadata"]["annotations"]["helm.sh/hook-weight"]
        )
        assert "hook-succeeded" in annotations["helm.sh/hook-delete-policy"]
    assert rendered[("ConfigMap", "klique-migrate")]["data"] == rendered[("ConfigMap", "klique")]["data"]
    assert [source["configMapRef"]["name"] for source in container(job)["envFrom"][:1]] == ["klique-migrate"]
    config = rendered[("ConfigMap", "klique")]["data"]
    assert config["DJANGO_SETTINGS_MODULE"] == "klique.settings.production"
    assert config["ALLOWED_HOSTS"] == "klique.test.example"
    assert config["CSRF_TRUSTED_ORIGINS"] == "https://klique.test.example"
    assert set(rendered[("Secret", "klique")]["stringData"]) >= {"SECRET_KEY", "DATABASE_URL", "REDIS_URL"}


def test_every_workload_has_a_liveness_probe_and_the_processes_without_a_port_probe_their_alive_file(
    rendered,
):
    deployments = {name: doc for (kind, name), doc in rendered.items() if kind == "Deployment"}
    assert len(deployments) == 7
    for name, deployment in deployments.items():
        probe = container(deployment)["livenessProbe"]
        if name in ("klique-web", "klique-gateway"):
            assert probe["httpGet"]["path"] == "/healthz", name
        else:
            assert "find /tmp/klique-alive -mmin -2" in probe["exec"]["command"][-1], name
    assert rendered[("ConfigMap", "klique")]["data"]["KLIQUE_ALIVE_FILE"] == "/tmp/klique-alive"
    daemon = container(deployments["klique-worker-gpu-cluster-1"])
    assert {"name": "KLIQUE_WORKER_ALIVE_FILE", "value": "/tmp/klique-alive"} in daemon["env"]
    assert "/tmp" in [mount["mountPath"] for mount in daemon["volumeMounts"]]  # a read-only root


def test_the_opt_in_disruption_budget_network_policies_and_service_monitor(rendered, tmp_path):
    budget = rendered[("PodDisruptionBudget", "klique-web")]["spec"]
    assert (
        budget["minAvailable"] == 1
        and budget["selector"]["matchLabels"]["app.kubernetes.io/component"] == "web"
    )
    web = rendered[("NetworkPolicy", "klique-web")]["spec"]
    assert web["ingress"][0]["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert web["ingress"][0]["from"][0]["namespaceSelector"]
    closed = rendered[("NetworkPolicy", "klique-no-ingress")]["spec"]
    assert closed["policyTypes"] == ["Ingress"] and "ingress" not in closed
    assert ("ServiceMonitor", "klique") not in rendered  # off unless asked for
    monitored = render(
        tmp_path, serviceMonitor={"enabled": True, "interval": "15s", "labels": {"release": "prom"}}
    )
    monitor = monitored[("ServiceMonitor", "klique")]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    endpoint = monitor["spec"]["endpoints"][0]
    assert (endpoint["path"], endpoint["interval"]) == ("/metrics", "15s")
    assert endpoint["authorization"]["credentials"] == {"name": "klique", "key": "METRICS_TOKEN"}


def test_each_worker_pool_gets_its_account_and_the_rbac_of_deploy_kubernetes(rendered):
    role_yaml = next(yaml.safe_load_all((DEPLOY / "kubernetes" / "role.yaml").read_text()))
    cluster_yaml = next(yaml.safe_load_all((DEPLOY / "kubernetes" / "cluster-role.yaml").read_text()))
    for pool, namespace in (("gpu-cluster-1", "klique"), ("gpu-cluster-2", "ml-jobs")):
        name = f"klique-worker-{pool}"
        deployment = rendered[("Deployment", name)]
        assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
        assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == name
        env = {e["name"]: e.get("value") for e in container(deployment)["env"]}
        assert env["KLIQUE_WORKER_MODE"] == "kubernetes" and env["KLIQUE_WORKER_HOSTNAME"] == pool
        assert env["KLIQUE_KUBE_NAMESPACE"] == namespace
        assert rendered[("ServiceAccount", name)]
        role = rendered[("Role", name)]
        assert role["metadata"]["namespace"] == namespace and role["rules"] == role_yaml["rules"]
        assert rendered[("RoleBinding", name)]["subjects"][0]["name"] == name
    assert (
        rendered[("ClusterRole", "klique-worker-gpu-cluster-2-all-namespaces")]["rules"]
        == cluster_yaml["rules"]
    )
    assert ("ClusterRole", "klique-worker-gpu-cluster-1-all-namespaces") not in rendered
    node_reader = next(yaml.safe_load_all((DEPLOY / "kubernetes" / "node-reader.yaml").read_text()))
    for pool in ("gpu-cluster-1", "gpu-cluster-2"):  # every daemon may list nodes, for its capacity
        assert rendered[("ClusterRole", f"klique-worker-{pool}-nodes")]["rules"] == node_reader["rules"]
        binding = rendered[("ClusterRoleBinding", f"klique-worker-{pool}-nodes")]
        assert binding["subjects"][0]["name"] == f"klique-worker-{pool}"
