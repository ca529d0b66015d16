"""Data migrations of pools, run against a database at the migration before them."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)


def test_existing_kubernetes_and_hpc_pools_become_multi_node_and_the_others_not():
    executor = MigrationExecutor(connection)
    before, after = [("pools", "0002_worker_daemons")], [("pools", "0003_multi_node_namespace_worker_modes")]
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    gpu = old.get_model("pools", "GpuType").objects.create(name="H100")
    Pool = old.get_model("pools", "Pool")
    kinds = ("kubernetes", "hpc", "baremetal", "cloud")
    ids = {kind: Pool.objects.create(name=kind, kind=kind, gpu_type=gpu, capacity=8).pk for kind in kinds}
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    new = executor.loader.project_state(after).apps.get_model("pools", "Pool")
    assert {kind: new.objects.get(pk=pk).multi_node for kind, pk in ids.items()} == {
        "kubernetes": True,
        "hpc": True,
        "baremetal": False,
        "cloud": False,
    }
    MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
