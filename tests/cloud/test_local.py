"""The local provider starts real ``klique-worker`` processes. Their control plane is a closed port
on this host, so each daemon keeps retrying its enrolment: enough to see it run with the node's
flags and environment, and to stop it. No Django is involved."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from klique.cloud.local import LocalProvider, read_user_data
from klique.cloud.providers import CapacityUnavailable, ProviderError, SpotRefused, open_provider


def poll(check, what: str, timeout_s: float = 30):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s} s: {what}")
        time.sleep(0.1)


@pytest.fixture
def server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def user_data(server):
    return (
        "#!/bin/sh\n"
        f"export KLIQUE_SERVER={server}\n"
        "KLIQUE_ENROLMENT_TOKEN='kqe_local_test'\n"
        "KLIQUE_WORKER_RETRY_MAX_S=1\n"
        "NOT_KLIQUE=ignored\n"
        "exec klique-worker\n"
    )


@pytest.fixture
def folder(tmp_path):
    """The provider's folder; every node still alive at the end is killed."""
    yield tmp_path
    ledger = tmp_path / "instances.json"
    if ledger.exists():
        for entry in json.loads(ledger.read_text()).values():
            if Path(f"/proc/{entry['pid']}/environ").exists():
                try:
                    os.kill(entry["pid"], 9)
                except ProcessLookupError:
                    pass


@pytest.fixture
def provider(folder):
    return LocalProvider(folder, {"local.2gpu": 2, "local.8gpu": 8}, kill_after_s=1)


def pid_of(folder: Path, instance_id: str) -> int:
    return json.loads((folder / "instances.json").read_text())[instance_id]["pid"]


def proc(pid: int, name: str) -> list[str]:
    return Path(f"/proc/{pid}/{name}").read_bytes().decode().split("\0")


def test_launch_runs_klique_worker_with_the_nodes_gpus_hostname_and_user_data(
    provider, folder, user_data, server
):
    node = provider.launch("cloud-a100", "cloud-a100-1", "local.2gpu", "spot", user_data)

    assert (node.node, node.pool, node.instance_type, node.market, node.state) == (
        "cloud-a100-1",
        "cloud-a100",
        "local.2gpu",
        "spot",
        "pending",
    )
    pid = pid_of(folder, node.instance_id)
    command = poll(lambda: [part for part in proc(pid, "cmdline") if part], "the worker's command line")
    assert any(part.endswith("/klique-worker") for part in command[:2])
    flags = command[command.index("--mode") :]
    assert flags[:6] == ["--mode", "process", "--gpus", "2", "--hostname", "cloud-a100-1"]
    assert flags[6:8] == ["--state-dir", str(folder / "nodes" / node.instance_id / "state")]
    assert "kqe_local_test" not in " ".join(command)
    environment = proc(pid, "environ")
    assert f"KLIQUE_SERVER={server}" in environment
    assert "KLIQUE_ENROLMENT_TOKEN=kqe_local_test" in environment
    assert f"KLIQUE_CLOUD_INSTANCE={node.instance_id}" in environment
    assert not any(line.startswith("NOT_KLIQUE=") for line in environment)
    poll(
        lambda: "control plane unreachable" in provider.log_path(node.instance_id).read_text(),
        "the worker tries to enrol with its server",
    )
    assert [(n.instance_id, n.state, n.live) for n in provider.describe("cloud-a100")] == [
        (node.instance_id, "running", True)
    ]


def test_terminate_stops_the_worker_and_describe_reports_it_terminated(provider, folder, user_data):
    node = provider.launch("cloud-a100", "cloud-a100-1", "local.2gpu", "on-demand", user_data)
    other = provider.launch("cloud-a100", "cloud-a100-2", "local.2gpu", "on-demand", user_data)
    pid = pid_of(folder, node.instance_id)
    poll(
        lambda: "klique-worker starting" in provider.log_path(node.instance_id).read_text(),
        "the worker starts",
    )

    provider.terminate([node.instance_id])

    ended = poll(
        lambda: [
            n
            for n in provider.describe("cloud-a100")
            if n.instance_id == node.instance_id and n.state == "terminated"
        ],
        "the node ends",
    )
    # klique-worker leaves on SIGTERM, or, while it still retries its enrolment, once killed.
    assert ended[0].reason in ("terminated", "killed: still running after SIGTERM")
    assert not Path(f"/proc/{pid}").exists()
    states = {n.instance_id: n.state for n in provider.describe("cloud-a100")}
    assert states == {node.instance_id: "terminated", other.instance_id: "running"}
    provider.terminate([node.instance_id])


def test_a_node_still_running_after_sigterm_is_killed_with_its_process_group(folder, user_data):
    ignores_sigterm = ["/bin/sh", "-c", "trap '' TERM; echo up; sleep 600 & wait", "node"]
    provider = LocalProvider(folder, {"local.2gpu": 2}, worker_command=ignores_sigterm, kill_after_s=1)
    node = provider.launch("cloud", "cloud-1", "local.2gpu", "on-demand", user_data)
    poll(lambda: "up" in provider.log_path(node.instance_id).read_text(), "the node starts")
    pid = pid_of(folder, node.instance_id)

    provider.terminate([node.instance_id])
    assert provider.describe("cloud")[0].state == "stopping"

    ended = poll(
        lambda: [n for n in provider.describe("cloud") if n.state == "terminated"], "the node is killed"
    )
    assert ended[0].reason == "killed: still running after SIGTERM"
    assert not Path(f"/proc/{pid}").exists()
    poll(
        lambda: not subprocess.run(["pgrep", "-g", str(pid), "-r", "RSD"], capture_output=True).stdout,
        "no process of the node's group runs on",
    )


def test_nodes_outlive_the_provider_object_that_launched_them(folder, user_data):
    launched = LocalProvider(folder, {"local.2gpu": 2}).launch(
        "pool-a", "pool-a-1", "local.2gpu", "spot", user_data
    )
    LocalProvider(folder, {"local.2gpu": 2}).launch("pool-b", "pool-b-1", "local.2gpu", "spot", user_data)

    later = LocalProvider(folder, kill_after_s=0)
    assert [(n.instance_id, n.node, n.state) for n in later.describe("pool-a")] == [
        (launched.instance_id, "pool-a-1", "running")
    ]
    assert [n.node for n in later.describe("pool-b")] == ["pool-b-1"]
    assert later.describe("pool-c") == []
    later.terminate([launched.instance_id])
    poll(lambda: later.describe("pool-a")[0].state == "terminated", "the node ends")
    assert later.describe("pool-b")[0].state == "running"


def test_a_worker_that_exits_is_terminated_with_its_exit_code(provider, user_data):
    node = provider.launch(
        "cloud", "cloud-1", "local.2gpu", "on-demand", user_data + "KLIQUE_WORKER_POLL_MIN_S=x\n"
    )

    ended = poll(
        lambda: [n for n in provider.describe("cloud") if n.state == "terminated"], "the worker exits"
    )
    assert ended[0].instance_id == node.instance_id
    assert ended[0].reason == "exited with code 1"


def test_spot_is_refused_without_spot_capacity_and_on_demand_then_launches(folder, user_data):
    provider = LocalProvider(folder, {"local.2gpu": 2}, spot_available=False)

    with pytest.raises(SpotRefused) as caught:
        provider.launch("cloud", "cloud-1", "local.2gpu", "spot", user_data)
    assert caught.value.code == "InsufficientInstanceCapacity"
    assert provider.describe("cloud") == []

    node = provider.launch("cloud", "cloud-1", "local.2gpu", "on-demand", user_data)
    assert [(n.instance_id, n.market) for n in provider.describe("cloud")] == [
        (node.instance_id, "on-demand")
    ]


def test_a_full_host_refuses_on_demand_as_capacity_unavailable(folder, user_data):
    provider = LocalProvider(folder, {"local.2gpu": 2}, max_nodes=1)
    provider.launch("cloud", "cloud-1", "local.2gpu", "on-demand", user_data)

    with pytest.raises(SpotRefused):
        provider.launch("cloud", "cloud-2", "local.2gpu", "spot", user_data)
    with pytest.raises(CapacityUnavailable) as caught:
        provider.launch("cloud", "cloud-2", "local.2gpu", "on-demand", user_data)
    assert caught.value.code == "InsufficientInstanceCapacity"
    assert [n.node for n in provider.describe("cloud")] == ["cloud-1"]


def test_launch_refuses_missing_user_data_and_unknown_types(provider, user_data):
    with pytest.raises(ProviderError) as caught:
        provider.launch("cloud", "cloud-1", "local.2gpu", "spot", "KLIQUE_SERVER=http://127.0.0.1:1\n")
    assert caught.value.code == "InvalidUserData" and "KLIQUE_ENROLMENT_TOKEN" in caught.value.message
    with pytest.raises(ProviderError) as caught:
        provider.launch("cloud", "cloud-1", "local.3gpu", "spot", user_data)
    assert caught.value.code == "InvalidInstanceType" and "local.2gpu, local.8gpu" in caught.value.message
    with pytest.raises(ProviderError) as caught:
        provider.launch("cloud", "cloud 1; rm", "local.2gpu", "spot", user_data)
    assert caught.value.code == "InvalidParameterValue"
    with pytest.raises(ProviderError) as caught:
        provider.terminate(["local-nope"])
    assert caught.value.code == "InvalidInstanceID.NotFound"
    assert provider.describe("cloud") == []


def test_without_instance_types_the_gpus_come_from_the_user_data(folder, user_data):
    node = LocalProvider(folder).launch(
        "cloud", "cloud-1", "any", "spot", user_data + "KLIQUE_WORKER_GPUS=3\n"
    )

    pid = pid_of(folder, node.instance_id)
    command = poll(lambda: [part for part in proc(pid, "cmdline") if part], "the worker's command line")
    assert command[command.index("--gpus") + 1] == "3"


def test_user_data_is_read_as_a_boot_scripts_variables():
    assert read_user_data(
        "#!/bin/sh\n# a comment\nexport KLIQUE_SERVER='https://k.example.org'\n"
        'KLIQUE_ENROLMENT_TOKEN="kqe a"\nPATH=/x\nKLIQUE_WORKER_GPUS=4 # four\nexec klique-worker\n'
    ) == {
        "KLIQUE_SERVER": "https://k.example.org",
        "KLIQUE_ENROLMENT_TOKEN": "kqe a",
        "KLIQUE_WORKER_GPUS": "4",
    }


def test_the_registry_opens_providers_by_name_and_names_bad_settings(tmp_path):
    provider = open_provider("local", {"folder": str(tmp_path), "instance_types": {"local.1gpu": 1}})
    assert isinstance(provider, LocalProvider) and provider.instance_types == {"local.1gpu": 1}
    with pytest.raises(ValueError) as caught:
        open_provider("local", {"instance_types": {"x": -1}, "spot_available": "no", "region": "eu"})
    message = str(caught.value)
    for field in (
        "folder: required",
        "instance_types: ",
        "spot_available: true or false",
        "region: not a setting",
    ):
        assert field in message
    with pytest.raises(KeyError):
        open_provider("gcp", {})


def test_the_cloud_package_imports_neither_django_nor_boto3_outside_ec2():
    code = (
        "import sys, klique.cloud.providers, klique.cloud.local; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'boto3', 'botocore')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
