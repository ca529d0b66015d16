"""``DockerRunner``, the runner the daemon calls in Docker mode: its flags, ``start`` (the image
pulled in the background when missing, then the container created and started), ``poll`` (one
listing of the worker's containers), ``terminate``, ``kill`` and the adoption of containers an
earlier daemon left; the mode as a whole is described in the package's docstring."""

import logging
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import docker
import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from klique.worker.docker.containers import POOL, TASK, WORKER, ContainerSpecs, label_value
from klique.worker.runs import Change, StartFailed, env, start_failure

log = logging.getLogger("klique.worker")

LIST_EVERY_S = 0.5
API_TIMEOUT_S = 60
TAIL_CHARS = 16_000
KEPT_TAILS = 256
RUNNING = {"running", "paused", "restarting"}
ENDED = {"exited", "dead", "stopped"}
# What the daemon answers (as a server error on Podman) when the task's own image or command is at
# fault: the same anywhere, so the start failure recurs.
TASK_FAULTS = (
    "invalid reference format",
    "executable file not found",
    "no such file or directory",
    "repository name must",
)


def api_failure(error: Exception, doing: str) -> StartFailed:
    """A Docker API error at start: the task's fault (a 4xx, or a server error naming its image
    or command) recurs anywhere; the daemon not answering, or failing otherwise, is this host's."""
    message = f"{doing}: {getattr(error, 'explanation', None) or error}"
    if isinstance(error, APIError):
        faulty = error.is_client_error() or any(m in message.lower() for m in TASK_FAULTS)
        return StartFailed(message, recurs=faulty)
    return StartFailed(message, recurs=False)


@dataclass
class Box:
    """One task's container, from its image pull or creation until it has ended."""

    task_id: int
    name: str
    config: dict = field(default_factory=dict)
    container_id: str = ""
    pull: Future | None = None
    announced: bool = False
    stopped: bool = False


class DockerRunner(ContainerSpecs):
    mode = "docker"
    claims_total = False  # the daemon picks the GPUs and hands their ids to the container
    multi_node = False
    whole_gpus = False
    limits_time = False  # the daemon stops work at its time limit (klique/worker/work.py)

    def __init__(
        self,
        client: docker.DockerClient,
        checkpoint_root: Path,
        *,
        tag: str,
        image: str = "",
        network: str = "",
        gpus: str = "auto",
        pull: str = "missing",
        init: bool = True,
        clock=time.monotonic,
    ):
        self.client, self.api = client, client.api
        self.checkpoint_root, self.tag = checkpoint_root, label_value(tag) or "worker"
        self.image, self.network, self.pull_policy, self.init = image, network, pull, init
        self.clock = clock
        self.nvidia = self.has_nvidia_runtime() if gpus == "auto" else gpus == "nvidia"
        self.boxes: dict[int, Box] = {}
        self.tails: OrderedDict[int, str] = OrderedDict()
        self.recovered: dict[int, str] = {}
        self.next_list = 0.0
        # Image pulls and SIGKILLs (which Podman answers only once the container has stopped).
        self.background = ThreadPoolExecutor(max_workers=4, thread_name_prefix="klique-docker")
        self.pending: list[Change] = []  # what the next poll reports before listing

    # CLI wiring.

    @classmethod
    def add_arguments(cls, group) -> None:
        group.add_argument(
            "--docker-host",
            default=env("DOCKER_HOST", "unix:///var/run/docker.sock"),
            help="the Docker (or Podman) API to run containers with [DOCKER_HOST]",
        )
        group.add_argument(
            "--docker-image",
            default=env("KLIQUE_DOCKER_IMAGE", ""),
            help="image of tasks whose spec and profile name none [KLIQUE_DOCKER_IMAGE]",
        )
        group.add_argument(
            "--docker-network",
            default=env("KLIQUE_DOCKER_NETWORK", ""),
            help="network to attach task containers to (default: the daemon's) [KLIQUE_DOCKER_NETWORK]",
        )
        group.add_argument(
            "--docker-gpus",
            choices=["auto", "nvidia", "none"],
            default=env("KLIQUE_DOCKER_GPUS", "auto"),
            help="hand GPUs to containers through the NVIDIA runtime (auto: when `docker info` lists "
            "it) [KLIQUE_DOCKER_GPUS]",
        )
        group.add_argument(
            "--docker-pull",
            choices=["missing", "never"],
            default=env("KLIQUE_DOCKER_PULL", "missing"),
            help="pull an image not on this host, or refuse the task [KLIQUE_DOCKER_PULL]",
        )
        group.add_argument(
            "--docker-no-init",
            action="store_true",
            default=env("KLIQUE_DOCKER_NO_INIT", "") not in ("", "0", "false"),
            help="run the task's shell as the container's first process, without Docker's init "
            "(which passes signals on and reaps orphans) [KLIQUE_DOCKER_NO_INIT]",
        )

    @classmethod
    def from_args(cls, args, *, state_dir: Path, checkpoint_root: Path, hostname: str) -> "DockerRunner":
        try:
            client = docker.DockerClient(base_url=args.docker_host, version="auto", timeout=API_TIMEOUT_S)
        except (DockerException, requests.RequestException) as error:
            raise SystemExit(f"klique-worker: no Docker API at {args.docker_host}: {error}") from error
        runner = cls(
            client,
            checkpoint_root,
            tag=hostname,
            image=args.docker_image,
            network=args.docker_network,
            gpus=args.docker_gpus,
            pull=args.docker_pull,
            init=not args.docker_no_init,
        )
        if not runner.nvidia:
            fields = {"docker_gpus": args.docker_gpus}
            log.warning("no NVIDIA runtime: containers get no GPUs", extra={"fields": fields})
        return runner

    def has_nvidia_runtime(self) -> bool:
        info = self.client.info()
        return "nvidia" in (info.get("Runtimes") or {}) or info.get("DefaultRuntime") == "nvidia"

    # Starting.

    def start(self, task: dict, devices: list[str]) -> None:
        task_id = task["id"]
        image = (task.get("runtime") or {}).get("image") or self.image
        if not image:
            raise StartFailed(
                "no image to run: the task's spec.image, its profile's default image or the worker's "
                "--docker-image names one",
                recurs=True,
            )
        checkpoints = self.checkpoint_root / str(task_id)
        box = Box(task_id, self.name(task_id), self.config(task, devices, image, checkpoints))
        try:
            checkpoints.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise start_failure(error) from error
        if self.image_here(image):
            self.create(box)
        elif self.pull_policy == "never":
            raise StartFailed(f"image {image} is not on this host (and --docker-pull is never)", recurs=True)
        else:
            log.info("pulling", extra={"fields": {"task": task_id, "image": image}})
            box.pull = self.background.submit(self.pull, image)
        self.boxes[task_id] = box

    def image_here(self, image: str) -> bool:
        try:
            self.api.inspect_image(image)
            return True
        except ImageNotFound:
            return False
        except (DockerException, requests.RequestException) as error:
            raise api_failure(error, f"image {image}") from error

    def pull(self, image: str) -> None:
        """Pull ``image`` (in a pull thread); raise with the registry's reason when it fails."""
        for line in self.api.pull(image, stream=True, decode=True):
            if isinstance(line, dict) and line.get("error"):
                raise RuntimeError(line["error"])
        self.api.inspect_image(image)

    def create(self, box: Box) -> None:
        """Create and start the container (removing a stale one of the same name first)."""
        try:
            self.api.remove_container(box.name, force=True)
        except NotFound:
            pass
        except (DockerException, requests.RequestException) as error:
            raise api_failure(error, "removing a stale container") from error
        container = None
        try:
            container = self.client.containers.create(**box.config)
            container.start()
        except (DockerException, requests.RequestException) as error:
            if container is not None:
                self.remove(container.id)
            raise api_failure(error, f"starting {box.name}") from error
        box.container_id = container.id
        log.info("container started", extra={"fields": {"task": box.task_id, "container": box.name}})

    # Following.

    def poll(self) -> list[Change]:
        changes, self.pending = self.pending + self.pulled(), []
        now = self.clock()
        if now < self.next_list or not any(box.container_id for box in self.boxes.values()):
            return changes
        self.next_list = now + LIST_EVERY_S
        try:
            listed = self.api.containers(all=True, filters={"label": [f"{WORKER}={self.tag}"]})
        except (DockerException, requests.RequestException) as error:
            log.warning("listing containers failed", extra={"fields": {"error": str(error)}})
            return changes
        states = {item["Id"]: str(item.get("State") or "").lower() for item in listed}
        for task_id, box in list(self.boxes.items()):
            if not box.container_id:
                continue
            state = states.get(box.container_id)
            if state is None:
                del self.boxes[task_id]
                detail = {"container": box.name, "reason": "the container was removed"}
                changes.append(Change(task_id, "released", detail=detail))
            elif state in RUNNING or state in ENDED:
                if not box.announced:
                    box.announced = True
                    changes.append(Change(task_id, "running", detail={"container": box.name}))
                if state in ENDED:
                    changes.append(self.ended(box))
        return changes

    def pulled(self) -> list[Change]:
        """Create the containers whose image has arrived; a failed pull fails its task."""
        changes = []
        for task_id, box in list(self.boxes.items()):
            if box.pull is None or not box.pull.done():
                continue
            error, box.pull = box.pull.exception(), None
            if box.stopped:
                del self.boxes[task_id]
                changes.append(Change(task_id, "released", detail={"reason": "stopped while pulling"}))
                continue
            try:
                if error is not None:
                    raise api_failure(error, f"pulling {box.config['image']}")
                self.create(box)
            except StartFailed as failure:
                del self.boxes[task_id]
                if failure.recurs or error is not None:
                    changes.append(Change(task_id, "failed", detail={"error": str(failure)}))
                else:
                    changes.append(Change(task_id, "released", detail={"reason": str(failure)}))
        return changes

    def ended(self, box: Box) -> Change:
        """The exit of a container that has ended: its code from its state, its log tail kept."""
        del self.boxes[box.task_id]
        try:
            state = self.api.inspect_container(box.container_id)["State"]
        except (DockerException, requests.RequestException) as error:
            return Change(box.task_id, "released", detail={"container": box.name, "reason": str(error)})
        tail = self.read_tail(box.container_id)
        if state.get("OOMKilled"):
            tail += "\nklique-worker: the container was killed at its memory limit\n"
        self.keep_tail(box.task_id, tail)
        self.remove(box.container_id)
        detail = {"container": box.name, "oom_killed": bool(state.get("OOMKilled"))}
        return Change(box.task_id, "exited", int(state.get("ExitCode") or 0), detail)

    def terminate(self, task_id: int, grace_s: float = 0) -> None:
        """SIGTERM to the container's init (which passes it on); the daemon sends ``kill`` once
        ``grace_s`` is over. A task still waiting for its image is not started."""
        box = self.boxes.get(task_id)
        if box is not None:
            box.stopped = True
            self.signal(box, "SIGTERM")

    def kill(self, task_id: int) -> None:
        """SIGKILL, sent from a background thread: the call returns once the container stopped."""
        box = self.boxes.get(task_id)
        if box is not None:
            box.stopped = True
            self.background.submit(self.signal, box, "SIGKILL")

    def signal(self, box: Box, name: str) -> None:
        if not box.container_id:
            return
        try:
            self.api.kill(box.container_id, signal=name)
        except (DockerException, requests.RequestException) as error:
            # Not running any more (the next poll reports how it ended), or the daemon not answering.
            log.info("signal not delivered", extra={"fields": {"task": box.task_id, "error": str(error)}})

    def log_tail(self, task_id: int) -> str:
        if task_id in self.tails:
            return self.tails[task_id]
        box = self.boxes.get(task_id)
        return self.read_tail(box.container_id) if box is not None and box.container_id else ""

    def read_tail(self, container_id: str) -> str:
        try:
            output = self.api.logs(container_id, stdout=True, stderr=True, tail=500)
        except (DockerException, requests.RequestException):
            return ""
        return output.decode(errors="replace")[-TAIL_CHARS:]

    def keep_tail(self, task_id: int, tail: str) -> None:
        self.tails[task_id] = tail
        while len(self.tails) > KEPT_TAILS:
            self.tails.popitem(last=False)

    def remove(self, container_id: str) -> None:
        try:
            self.api.remove_container(container_id, force=True)
        except (DockerException, requests.RequestException) as error:
            log.warning("could not remove a container", extra={"fields": {"error": str(error)}})

    # After a daemon restart.

    def recover(self) -> dict[int, str]:
        """The tasks whose containers (running, or ended meanwhile) an earlier daemon of this tag
        left: task id -> the pool label of its container ("" when it has none)."""
        try:
            listed = self.api.containers(all=True, filters={"label": [f"{WORKER}={self.tag}"]})
        except (DockerException, requests.RequestException) as error:
            # Following nothing would leave those containers running unseen while their tasks run again.
            raise SystemExit(f"klique-worker: cannot list this worker's containers: {error}") from error
        self.recovered, found = {}, {}
        for item in listed:
            labels = item.get("Labels") or {}
            task = labels.get(TASK, "")
            if task.isdigit():
                self.recovered[int(task)] = item["Id"]
                found[int(task)] = labels.get(POOL, "")
        return dict(sorted(found.items()))

    def adopt(self, tasks: list[dict], drop: list[int]) -> None:
        """Follow the containers of ``tasks``; remove those of ``drop``, and nothing else."""
        for task in tasks:
            task_id, container_id = task["id"], self.recovered.get(task["id"])
            if container_id:
                box = Box(task_id, self.name(task_id), container_id=container_id, announced=True)
                self.boxes[task_id] = box
            else:
                self.pending.append(Change(task_id, "released", detail={"reason": "no container left"}))
        for task_id in drop:
            container_id = self.recovered.get(task_id)
            if container_id:
                self.remove(container_id)
                log.info("removed a container not ours any more", extra={"fields": {"task": task_id}})
        self.recovered = {}
