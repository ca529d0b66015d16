"""The autoscaler's pass with the local provider: each node is a real ``klique-worker`` process
(here its control plane is a closed port, so it never enrols unless a test says otherwise)."""

import io
import json
import os
import signal
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.utils import timezone

from apps.cloud import services as cloud
from apps.cloud.models import CloudNode, CloudPool
from apps.cloud.services import launching
from apps.pools.models import Pool, Worker
from apps.workers import services as protocol
from klique.cloud.local import read_user_data
from tests.cloud_pools.conftest import FAST_WORKER, alive, node_pid, process_environment, wait_for
from tests.factories import GpuTypeFactory

pytestmark = pytest.mark.django_db


def test_declared_capacity_of_a_cloud_pool_is_the_sum_of_its_types_maxima(local_cloud):
    cloud_pool = local_cloud(types=(("local.1gpu", 1, 3, True), ("local.4gpu", 4, 2, False)))
    assert Pool.objects.get(pk=cloud_pool.pool_id).capacity == Decimal("11")


def test_a_cloud_pools_claim_timeout_covers_a_nodes_boot(local_cloud, settings):
    cloud_pool = local_cloud()
    pool = Pool.objects.get(pk=cloud_pool.pool_id)
    assert pool.claim_timeout_s == cloud_pool.boot_timeout_s + settings.WORKER_CLAIM_TIMEOUT_S


def test_no_work_no_node(local_cloud):
    local_cloud()
    summary = cloud.autoscale()
    assert summary["burst"]["demand"] == "0" and not summary["burst"].get("launched")
    assert not CloudNode.objects.exists()


def test_placed_work_launches_a_spot_node_with_a_single_use_token_in_its_user_data(local_cloud, place):
    cloud_pool = local_cloud()
    place(cloud_pool.pool, 1)
    summary = cloud.autoscale()
    assert summary["burst"]["launched"] == 1
    node = CloudNode.objects.get()
    assert (node.state, node.market, node.instance_type.name) == ("booting", "spot", "local.1gpu")
    assert node.enrolment_token.single_use and node.enrolment_token.pool_id == cloud_pool.pool_id
    environment = process_environment(node_pid(cloud_pool, node))
    assert environment["KLIQUE_WORKER_HOSTNAME"] == node.name
    assert environment["KLIQUE_WORKER_GPUS"] == "1"
    assert environment["KLIQUE_SERVER"] == "http://127.0.0.1:9"
    assert environment["KLIQUE_ENROLMENT_TOKEN"].startswith(node.enrolment_token.prefix)
    assert environment["KLIQUE_WORKER_POLL_MIN_S"] == FAST_WORKER["KLIQUE_WORKER_POLL_MIN_S"]
    assert cloud.autoscale()["burst"].get("launched", 0) == 0, "the booting node is supply already"


def test_spot_refused_falls_back_to_on_demand_at_once_and_records_both_attempts(local_cloud, place):
    cloud_pool = local_cloud(spot_available=False)
    place(cloud_pool.pool, 1)
    cloud.autoscale()
    node = CloudNode.objects.get()
    assert (node.state, node.market) == ("booting", "on-demand")
    spot, on_demand = node.attempts
    assert (spot["market"], spot["code"]) == ("spot", "InsufficientInstanceCapacity")
    assert on_demand["market"] == "on-demand" and on_demand["instance_id"] == node.instance_id
    assert alive(node_pid(cloud_pool, node))


def test_a_launch_error_other_than_capacity_ends_the_node_with_the_providers_reason(local_cloud, place):
    cloud_pool = local_cloud(types=(("local.small", 1, 2, False), ("local.big", 1, 2, False)))
    cloud_pool.settings = {**cloud_pool.settings, "instance_types": {"local.big": 1}}
    cloud_pool.save()
    place(cloud_pool.pool, 1)
    cloud.autoscale()
    node = CloudNode.objects.get()
    assert (node.state, node.instance_type.name) == ("terminated", "local.small")
    assert node.reason.startswith("launch failed: InvalidInstanceType: 'local.small' is not one of")
    assert node.attempts[0]["code"] == "InvalidInstanceType"


def test_the_first_type_that_fits_the_largest_waiting_task_is_launched(local_cloud, place):
    cloud_pool = local_cloud(types=(("local.1gpu", 1, 4, False), ("local.4gpu", 4, 2, False)))
    place(cloud_pool.pool, 1, gpus="4")
    cloud.autoscale()
    assert list(CloudNode.objects.values_list("instance_type__name", flat=True)) == ["local.4gpu"]


def test_nodes_are_launched_until_supply_covers_demand_never_above_a_types_most(local_cloud, place):
    cloud_pool = local_cloud(types=(("local.1gpu", 1, 2, False),))
    place(cloud_pool.pool, 3)
    summary = cloud.autoscale()["burst"]
    assert (summary["launched"], summary["demand"], summary["supply"]) == (2, "3", "2")
    assert CloudNode.objects.filter(state="booting").count() == 2


def test_boot_timeout_terminates_the_node_shuts_it_out_and_replaces_it_after_a_backoff(local_cloud, place):
    cloud_pool = local_cloud(boot_timeout_s=60)
    place(cloud_pool.pool, 1)
    t0 = timezone.now()
    cloud.autoscale(t0)
    first = CloudNode.objects.get()
    pid = node_pid(cloud_pool, first)
    summary = cloud.autoscale(t0 + timedelta(seconds=61))["burst"]
    first.refresh_from_db()
    assert first.state == "releasing" and first.reason == "boot timeout: not enrolled within 60 s"
    assert summary["released"] == 1 and not summary.get("launched"), "one boot timeout: back off a while"
    first.enrolment_token.refresh_from_db()
    assert first.enrolment_token.revoked_at is not None, "a late boot cannot enrol"
    wait_for(lambda: not alive(pid), timeout=30, what="the timed-out node's process to end")
    cloud.autoscale(t0 + timedelta(seconds=61))
    first.refresh_from_db()
    assert first.state == "terminated" and first.terminated_at is not None
    assert first.reason.startswith("boot timeout")
    summary = cloud.autoscale(t0 + timedelta(seconds=121))["burst"]  # a boot timeout x 2 after the launch
    assert summary["launched"] == 1
    assert CloudNode.objects.exclude(pk=first.pk).get().state == "booting"


def test_a_node_the_provider_ended_is_terminated_with_the_providers_reason(local_cloud, place):
    cloud_pool = local_cloud()
    place(cloud_pool.pool, 1)
    cloud.autoscale()
    node = CloudNode.objects.get()
    os.kill(node_pid(cloud_pool, node), signal.SIGKILL)  # the VM vanished, as a spot interruption
    wait_for(lambda: not alive(node_pid(cloud_pool, node)), what="the node's process to end")
    cloud.autoscale()
    node.refresh_from_db()
    assert node.state == "terminated" and node.reason == "exited with code -9"


def test_a_node_holding_work_is_never_released_and_an_idle_one_is_after_the_idle_timeout(local_cloud, place):
    cloud_pool = local_cloud(idle_timeout_s=60)
    [task] = place(cloud_pool.pool, 1)
    cloud.autoscale()
    node = CloudNode.objects.get()
    now = timezone.now()
    worker, _ = protocol.enrol(
        node.enrolment_token, hostname=node.name, gpus=Decimal(1), mode="process", now=now
    )
    assert cloud.autoscale(now)["burst"]["enrolled"] == 1
    node.refresh_from_db()
    assert node.state == "ready" and node.worker_id == worker.pk
    protocol.claim(worker, free=None, free_gpus=Decimal(1), max_tasks=1, now=now)
    protocol.report_started(worker, task.pk, now=now)
    assert not cloud.autoscale(now + timedelta(minutes=10))["burst"].get("released")
    node.refresh_from_db()
    assert node.state == "ready" and node.idle_since is None
    done = now + timedelta(minutes=11)
    protocol.report_exited(worker, task.pk, exit_code=0, now=done)
    cloud.autoscale(done)
    node.refresh_from_db()
    assert node.idle_since == done and node.state == "ready"
    assert not cloud.autoscale(done + timedelta(seconds=59))["burst"].get("released")
    assert cloud.autoscale(done + timedelta(seconds=60))["burst"]["released"] == 1
    node.refresh_from_db()
    worker.refresh_from_db()
    assert (node.state, node.reason) == ("releasing", "idle for 60 s")
    assert worker.state == Worker.State.RETIRED, "it can claim nothing more"
    pid = node_pid(cloud_pool, node)
    wait_for(lambda: not alive(pid), timeout=30, what="the idle node's process to end")
    cloud.autoscale(done + timedelta(seconds=61))
    node.refresh_from_db()
    assert node.state == "terminated" and node.reason == "idle for 60 s"


@pytest.mark.django_db(transaction=True)
def test_run_engine_runs_the_autoscaler(local_cloud, place):
    cloud_pool = local_cloud()
    place(cloud_pool.pool, 1)
    handler = signal.getsignal(signal.SIGTERM)
    try:
        call_command("run_engine", passes=1, interval=0, stdout=io.StringIO())
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert CloudNode.objects.filter(cloud_pool=cloud_pool, state="booting").count() == 1


def test_credentials_in_a_pools_settings_are_refused_with_the_field_and_reason():
    pool = Pool.objects.create(name="c", kind=Pool.Kind.CLOUD, gpu_type=GpuTypeFactory(), capacity=0)
    settings = {"region": "eu-west-1", "image_id": "ami-0abc12345def67890", "secret_access_key": "x"}
    with pytest.raises(ValidationError) as raised:
        cloud.create_cloud_pool(pool=pool, provider="ec2", settings=settings)
    assert "secret_access_key: credentials are never stored" in raised.value.message_dict["settings"][0]


def test_a_cloud_pool_needs_a_pool_of_kind_cloud_and_good_provider_settings():
    pool = Pool.objects.create(name="b", kind=Pool.Kind.BAREMETAL, gpu_type=GpuTypeFactory(), capacity=0)
    with pytest.raises(ValidationError) as raised:
        cloud.create_cloud_pool(pool=pool, provider="ec2", settings={"region": "nowhere"})
    errors = raised.value.message_dict
    assert "Only a pool of kind cloud autoscales." in errors["pool"]
    assert (
        "image_id: required" in errors["settings"][0] and "region: not an AWS region" in errors["settings"][0]
    )
    assert not CloudPool.objects.exists()


def test_user_data_names_server_token_gpus_and_hostname(local_cloud, place, settings):
    settings.CLOUD_NODE_ENVIRONMENT = {}
    cloud_pool = local_cloud()
    node, raw = launching.new_node(cloud_pool, cloud_pool.instance_types.get(), timezone.now())
    assert read_user_data(cloud.user_data(node, node.instance_type, raw)) == {
        "KLIQUE_SERVER": "http://127.0.0.1:9",
        "KLIQUE_ENROLMENT_TOKEN": raw,
        "KLIQUE_WORKER_GPUS": "1",
        "KLIQUE_WORKER_HOSTNAME": node.name,
    }


def test_a_nodes_hostname_is_an_rfc_1123_host_name_whatever_its_pools_name(local_cloud, place):
    """Enrolment takes RFC 1123 host names only (docs/limits.md): no underscore from the pool's name."""
    from klique.worker.hostnames import hostname_error

    cloud_pool = local_cloud(name="gpu_burst")
    node, _ = launching.new_node(cloud_pool, cloud_pool.instance_types.get(), timezone.now())
    assert node.name.startswith("gpu-burst-") and hostname_error(node.name) is None


def test_the_celery_task_runs_the_pass_on_its_own_queue(local_cloud, place, settings):
    from apps.cloud.tasks import autoscale
    from klique.celery import app

    cloud_pool = local_cloud()
    place(cloud_pool.pool, 1)
    autoscale.apply().get()
    assert CloudNode.objects.filter(cloud_pool=cloud_pool, state="booting").count() == 1
    assert app.amqp.router.route({}, "klique.cloud.autoscale")["queue"].name == "autoscale"
    entry = settings.CELERY_BEAT_SCHEDULE["autoscale"]
    assert (entry["task"], entry["options"]["queue"]) == ("klique.cloud.autoscale", "autoscale")


def test_admin_lists_nodes_and_saving_types_sets_the_declared_capacity(local_cloud, place, admin_client):
    cloud_pool = local_cloud()
    place(cloud_pool.pool, 1)
    cloud.autoscale()
    node = CloudNode.objects.get()
    listing = admin_client.get("/admin/cloud/cloudnode/?state__exact=booting&market__exact=spot")
    assert listing.status_code == 200 and node.name in listing.content.decode()
    assert admin_client.get(f"/admin/cloud/cloudnode/{node.pk}/change/").status_code == 200
    page = admin_client.get(f"/admin/cloud/cloudpool/{cloud_pool.pk}/change/")
    assert page.status_code == 200 and "declared capacity (gpus)" in page.content.decode().lower()
    [kind] = cloud_pool.instance_types.all()
    form = {
        "pool": cloud_pool.pool_id,
        "provider": "local",
        "settings": json.dumps(cloud_pool.settings),
        "enabled": "on",
        "boot_timeout_s": 600,
        "idle_timeout_s": 300,
        "spot_timeout_s": 120,
        "instance_types-TOTAL_FORMS": 2,
        "instance_types-INITIAL_FORMS": 1,
        "instance_types-0-id": kind.pk,
        "instance_types-0-cloud_pool": cloud_pool.pk,
        "instance_types-0-rank": 0,
        "instance_types-0-name": kind.name,
        "instance_types-0-gpus": 1,
        "instance_types-0-max_count": 2,
        "instance_types-0-spot": "on",
        "instance_types-1-cloud_pool": cloud_pool.pk,
        "instance_types-1-rank": 1,
        "instance_types-1-name": "local.8gpu",
        "instance_types-1-gpus": 8,
        "instance_types-1-max_count": 3,
    }
    saved = admin_client.post(f"/admin/cloud/cloudpool/{cloud_pool.pk}/change/", form)
    assert saved.status_code == 302, saved.content.decode()[-3000:]
    assert Pool.objects.get(pk=cloud_pool.pool_id).capacity == Decimal("26")
    form["settings"] = json.dumps({**cloud_pool.settings, "password": "x"})
    refused = admin_client.post(f"/admin/cloud/cloudpool/{cloud_pool.pk}/change/", form)
    assert refused.status_code == 200 and "credentials are never stored" in refused.content.decode()
