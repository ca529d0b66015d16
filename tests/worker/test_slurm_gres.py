"""The GPUs Slurm has in a partition, read from ``sinfo --Node --format=%N|%G|%t`` (docs/workers.md,
"Slurm mode"): typed and untyped GPU GRES, several per node, each node once, and nodes that cannot
take work left out."""

from klique.worker.slurm import gres_gpus


def test_gpu_gres_of_the_nodes_that_can_take_work_are_summed_once_each():
    listed = "\n".join(
        [
            "gpu-1|gpu:a100:4(S:0-1)|idle",
            "gpu-2|gpu:4|mix",
            "gpu-2|gpu:4|mix",  # the same node in a second partition
            "gpu-3|gpu:h100:2,gpu:l40s:1,shard:8|alloc",
            "gpu-4|gpu:8|drain",
            "gpu-5|gpu:8|down*",
            "cpu-1|(null)|idle",
        ]
    )
    assert gres_gpus(listed) == 4 + 4 + 2 + 1


def test_nothing_listed_is_no_gpus():
    assert gres_gpus("") == 0
