"""``klique-worker``: flags, each with an environment variable, then the daemon.

KLIQUE_ENROLMENT_TOKEN=kqe_... klique-worker --server https://klique.example.org --gpus 4
klique-worker --mode slurm --gpus 16 --slurm-partition gpu --enrolment-token-file /etc/klique/token
klique-worker --mode kubernetes --gpus 32 --kube-namespace ml   (inside the cluster)

Each mode is one runner module, named in ``MODES``; its flags come from the module. A mode whose
library is not installed (``klique[kubernetes]``, ``klique[docker]``) says so when chosen.
"""

import argparse
import importlib
import json
import logging
import signal
import socket
import ssl
import sys
import time
from pathlib import Path

from klique.jsonlog import JsonFormatter
from klique.worker import __version__
from klique.worker.client import ControlPlane, tls_verify
from klique.worker.daemon import Daemon, Settings
from klique.worker.gpus import Nvml
from klique.worker.hostnames import hostname_error
from klique.worker.runs import env
from klique.worker.sessions import default_host

log = logging.getLogger("klique.worker")


# mode: (module, runner class, the extra that installs what it needs)
MODES = {
    "process": ("klique.worker.process", "ProcessRunner", ""),
    "slurm": ("klique.worker.slurm", "SlurmRunner", ""),
    "kubernetes": ("klique.worker.kubernetes.runner", "KubernetesRunner", "kubernetes"),
    "docker": ("klique.worker.docker.runner", "DockerRunner", "docker"),
}


def runner_class(mode: str):
    """The runner class of a mode, or an ImportError naming the extra to install."""
    module, name, extra = MODES[mode]
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as error:
        hint = f": pip install 'klique[{extra}]'" if extra else ""
        raise ImportError(f"{mode} mode needs {error.name or error}{hint}") from error


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="klique-worker", description="Serve a Klique pool: pull placed work and run it."
    )
    p.add_argument("--server", default=env("KLIQUE_SERVER"), help="control plane URL [KLIQUE_SERVER]")
    p.add_argument(
        "--enrolment-token",
        default=env("KLIQUE_ENROLMENT_TOKEN"),
        help="the pool's enrolment token [KLIQUE_ENROLMENT_TOKEN]; prefer the variable or a file",
    )
    p.add_argument(
        "--enrolment-token-file",
        default=env("KLIQUE_ENROLMENT_TOKEN_FILE"),
        help="a file holding the enrolment token [KLIQUE_ENROLMENT_TOKEN_FILE]",
    )
    p.add_argument(
        "--mode",
        choices=list(MODES),
        default=env("KLIQUE_WORKER_MODE", "process"),
        help="run tasks as subprocesses here, Slurm jobs, Kubernetes pods or Docker containers "
        "[KLIQUE_WORKER_MODE]",
    )
    p.add_argument(
        "--gpus",
        type=int,
        default=env("KLIQUE_WORKER_GPUS"),
        help="GPUs to serve; process and Docker modes find them through NVML when not given; in "
        "Slurm and Kubernetes modes, the GPUs of the partition or cluster served [KLIQUE_WORKER_GPUS]",
    )
    p.add_argument("--hostname", default=env("KLIQUE_WORKER_HOSTNAME", socket.gethostname()))
    p.add_argument(
        "--state-dir",
        type=Path,
        default=Path(env("KLIQUE_WORKER_STATE_DIR", Path.home() / ".local/state/klique-worker")),
        help="task folders, logs and the daemon's ledger of running work [KLIQUE_WORKER_STATE_DIR]",
    )
    p.add_argument(
        "--checkpoint-root",
        type=Path,
        default=env("KLIQUE_CHECKPOINT_ROOT"),
        help="KLIQUE_CHECKPOINT_DIR of each task is a folder under it (default: STATE_DIR/checkpoints)",
    )
    p.add_argument(
        "--ca-bundle",
        default=env("KLIQUE_CA_BUNDLE"),
        help="a CA file (PEM) to check the server's certificate with [KLIQUE_CA_BUNDLE; default: "
        "SSL_CERT_FILE, else the CAs shipped with certifi]",
    )
    p.add_argument("--poll-min", type=float, default=float(env("KLIQUE_WORKER_POLL_MIN_S", 1)))
    p.add_argument("--poll-max", type=float, default=float(env("KLIQUE_WORKER_POLL_MAX_S", 10)))
    p.add_argument("--retry-max", type=float, default=float(env("KLIQUE_WORKER_RETRY_MAX_S", 30)))
    p.add_argument("--tick", type=float, default=float(env("KLIQUE_WORKER_TICK_S", 0.5)))
    p.add_argument(
        "--wait",
        type=float,
        default=float(env("KLIQUE_WORKER_WAIT_S", 10)),
        help="seconds one long-poll for placed work lasts at most (the server allows up to its "
        "WORKER_WAIT_MAX_S); 0 turns waiting off [KLIQUE_WORKER_WAIT_S]",
    )
    p.add_argument(
        "--max-claim",
        type=int,
        default=int(env("KLIQUE_WORKER_MAX_CLAIM", 100)),
        help="tasks one claim may take at most, 1 to 100 [KLIQUE_WORKER_MAX_CLAIM]",
    )
    p.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=env("KLIQUE_LOG_FORMAT", env("LOG_FORMAT", "text")),
        help="text, or one JSON object a line [KLIQUE_LOG_FORMAT, else LOG_FORMAT]",
    )
    p.add_argument(
        "--keep-work-on-exit",
        action="store_true",
        default=env("KLIQUE_WORKER_KEEP_WORK_ON_EXIT", "") not in ("", "0", "false"),
        help="on SIGTERM leave the work running for the next daemon to adopt (Kubernetes, Docker) "
        "instead of stopping it [KLIQUE_WORKER_KEEP_WORK_ON_EXIT]",
    )
    p.add_argument(
        "--session-host",
        default=env("KLIQUE_SESSION_HOST"),
        help="the address session servers (Jupyter, IDE servers) bind to and are reached at; 0.0.0.0 "
        "binds every address and reports the hostname (default: the address this host's name resolves "
        "to, else 127.0.0.1) [KLIQUE_SESSION_HOST]",
    )
    p.add_argument(
        "--alive-file",
        default=env("KLIQUE_WORKER_ALIVE_FILE", ""),
        help="a file touched every few seconds while the daemon's loop turns, for a liveness probe "
        "(find FILE -mmin -2) [KLIQUE_WORKER_ALIVE_FILE]",
    )
    p.add_argument("--version", action="version", version=f"klique-worker {__version__}")
    for mode in MODES:
        try:
            cls = runner_class(mode)
        except ImportError:
            continue
        cls.add_arguments(p.add_argument_group(f"{mode} mode"))
    return p


class Formatter(logging.Formatter):
    """``2026-03-02T09:00:00Z INFO claimed task=12 gpus=1.000``, or one JSON object per line
    (``klique.jsonlog``; ``context``, the daemon's worker and pool ids once enrolled, on each line)."""

    def __init__(self, as_json: bool, context: dict | None = None):
        super().__init__()
        self.json = JsonFormatter(context=context) if as_json else None

    def format(self, record: logging.LogRecord) -> str:
        if self.json is not None:
            return self.json.format(record)
        at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + "Z"
        fields = getattr(record, "fields", {})
        pairs = " ".join(
            f"{key}={_quoted(value)}" for key, value in fields.items() if value not in (None, "")
        )
        return f"{at} {record.levelname:<7} {record.getMessage()} {pairs}".rstrip()


def _quoted(value) -> str:
    text = str(value)
    return json.dumps(text) if not text or any(c in text for c in ' "=') else text


def enrolment_token(args) -> str:
    if args.enrolment_token:
        return args.enrolment_token.strip()
    if args.enrolment_token_file:
        return Path(args.enrolment_token_file).read_text().strip()
    return ""


def devices(args, nvml) -> list[str] | None:
    """The GPUs to serve: the first ``--gpus`` of those NVML finds (by UUID), or 0..N-1."""
    found = nvml.gpus() if nvml is not None else []
    if args.gpus is None:
        return [gpu.uuid for gpu in found] if found else None
    if found:
        return [gpu.uuid for gpu in found[: args.gpus]]
    return [str(index) for index in range(args.gpus)]


# Libraries that log every request at INFO: the daemon logs state changes only (docs/workers.md).
CHATTY_LOGGERS = ("httpx", "httpcore", "urllib3", "kubernetes", "docker")


def quiet_libraries() -> None:
    """Only warnings from the HTTP libraries: at INFO the daemon's log is one line per state change
    (enrolled, claimed, started, ended, unreachable, reachable again), not one per request."""
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    log_context: dict = {}
    handler.setFormatter(Formatter(args.log_format == "json", log_context))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    quiet_libraries()
    token = enrolment_token(args)
    if not args.server or not token:
        parser().error("--server and an enrolment token (--enrolment-token, its file or variable) are needed")
    if not 1 <= args.max_claim <= 100:
        parser().error(f"--max-claim: {args.max_claim} is not from 1 to 100")
    if args.wait < 0:
        parser().error(f"--wait: {args.wait:g} is less than 0")
    if hostname_error(args.hostname):
        parser().error(
            f"--hostname: {args.hostname!a}: {hostname_error(args.hostname)} Set --hostname or "
            "KLIQUE_WORKER_HOSTNAME to this host's DNS name."
        )
    try:
        cls = runner_class(args.mode)
    except ImportError as error:
        parser().error(str(error))
    # Where the daemon picks the GPUs it finds them through NVML; a scheduler's GPUs are not local.
    nvml = None if cls.claims_total else Nvml.open()
    gpus = devices(args, nvml)
    if gpus is None:
        parser().error("no GPUs found through NVML: say how many with --gpus N (0 for CPU-only work)")
    checkpoints = args.checkpoint_root or args.state_dir / "checkpoints"
    try:
        runner = cls.from_args(
            args, state_dir=args.state_dir, checkpoint_root=checkpoints, hostname=args.hostname
        )
    except ValueError as error:  # an option the mode could not read
        parser().error(str(error))
    settings = Settings(
        hostname=args.hostname,
        enrolment_token=token,
        devices=gpus,
        poll_min_s=args.poll_min,
        poll_max_s=args.poll_max,
        retry_max_s=args.retry_max,
        tick_s=args.tick,
        wait_s=args.wait,
        max_claim=args.max_claim,
        keep_work_on_exit=args.keep_work_on_exit,
        session_host=args.session_host or default_host(socket.gethostname()),
        alive_file=args.alive_file,
    )
    try:
        verify = tls_verify(args.ca_bundle)
    except (OSError, ssl.SSLError) as error:
        parser().error(f"--ca-bundle {args.ca_bundle}: {error}")
    daemon = Daemon(
        settings, ControlPlane(args.server, verify=verify), runner, nvml=nvml, log_context=log_context
    )
    signal.signal(signal.SIGTERM, lambda *_: daemon.shutdown())
    signal.signal(signal.SIGINT, lambda *_: daemon.shutdown())
    log.info(
        "klique-worker starting",
        extra={
            "fields": {"version": __version__, "mode": args.mode, "server": args.server, "gpus": len(gpus)}
        },
    )
    return daemon.run()
