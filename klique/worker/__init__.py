"""``klique-worker``: the daemon that serves a pool. It pulls placed work from the control plane
over outbound HTTPS and runs it, as subprocesses on its host or as Slurm jobs. It imports no
Django: only the standard library, httpx and, when present, nvidia-ml-py."""

__version__ = "0.1.0"
