"""Docker mode: each claimed task runs as a container on this host's Docker daemon (or Podman's
Docker API), built with the ``docker`` SDK. The container ``klique-<task>-<tag>`` is labelled with
the worker's tag, the task, its group, project and user, runs ``/bin/sh -c COMMAND`` behind an init
process (so the task's processes get the stop signal) in the task's image (``spec.image``, the
profile's default image, else ``--docker-image``) and gets:

- the GPUs the claim gave it through a device request (``--gpus device=<ids>``) when the host has
  the NVIDIA runtime (``--docker-gpus``), with ``NVIDIA_VISIBLE_DEVICES`` naming them and
  ``CUDA_VISIBLE_DEVICES`` numbering them as the container sees them (0..n-1);
- a memory limit: for a fraction of a GPU the profile's memory cap (``runtime.memory_limit_mb``, the
  share of a GPU's host that fraction is sold with), and ``spec.resources.memory`` / ``cpu``;
- ``spec.env``, Klique's variables and its checkpoint folder bound at ``/klique/checkpoint``.

An image not on the host is pulled in the background (``--docker-pull missing``); the task stays
placed meanwhile, and a pull that fails is reported as ``failed`` with the registry's reason.
``poll`` lists the worker's containers (one call, at most every ``LIST_EVERY_S``): ``running``,
``exited`` with the exit code read from the container's state (then the log tail is kept and the
container removed), ``released`` when the container vanished behind the daemon's back.
``terminate`` sends SIGTERM, ``kill`` SIGKILL; neither waits (the daemon's own timer uses them to
stop a container at its time limit, klique/worker/work.py). Containers outlive the daemon: after
a restart ``recover`` finds them by the worker label (with the pool label each carries), and
``adopt`` follows those the control plane handed back (one that ended meanwhile reports its exit)
and removes those the daemon drops; another pool's, under the same hostname, are left alone.

The runner (``runner.DockerRunner``) builds each task's container from containers.py.
"""

from klique.worker.docker.runner import DockerRunner

__all__ = ["DockerRunner"]
