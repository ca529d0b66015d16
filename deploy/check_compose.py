"""Checks what a compose validator does not: that deploy/compose.yaml's references hold together.

Every depends_on names a service; every named volume is declared; bind-mounted files, build
contexts and Dockerfiles exist; the control plane's services start after the migrate one-shot
completed; beat runs once; the database is on a named volume; the env file's example sets what
klique/settings/production.py refuses to start without; each command is a role of
deploy/docker/docker-entrypoint.sh. Prints a summary, exits 1 naming each problem.
"""

import re
import sys
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parent
CONTROL_PLANE = {"web", "worker", "whatif", "beat"}
REQUIRED_ENV = {"SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "CSRF_TRUSTED_ORIGINS", "POSTGRES_PASSWORD"}


def problems(compose_file: Path = DEPLOY / "compose.yaml") -> tuple[list[str], dict]:
    compose = yaml.safe_load(compose_file.read_text())
    here = compose_file.parent
    services: dict = compose["services"]
    volumes = set(compose.get("volumes") or {})
    found: list[str] = []
    roles = set(
        re.findall(r"^  ([a-z-]+)\)$", (DEPLOY / "docker" / "docker-entrypoint.sh").read_text(), re.M)
    )
    for name, service in services.items():
        for target in service.get("depends_on") or {}:
            if target not in services:
                found.append(f"{name}: depends_on names no service {target!r}")
        for mount in service.get("volumes") or []:
            source = mount.split(":")[0]
            if source.startswith((".", "/")):
                if not (here / source).exists():
                    found.append(f"{name}: mounts {source}, which does not exist")
            elif source not in volumes:
                found.append(f"{name}: volume {source!r} is not declared")
        if build := service.get("build"):
            context = here / build["context"]
            if not (context / build.get("dockerfile", "Dockerfile")).is_file():
                found.append(f"{name}: no Dockerfile {build.get('dockerfile')} in {context}")
        env_files = service.get("env_file") or []
        for env_file in [env_files] if isinstance(env_files, str) else env_files:
            if not (here / f"{env_file}.example").is_file():
                found.append(f"{name}: env_file {env_file} has no {env_file}.example")
        command = service.get("command")
        if name in CONTROL_PLANE | {"migrate", "tls"} and (not command or command[0] not in roles):
            found.append(f"{name}: command {command} is not a role of docker-entrypoint.sh {sorted(roles)}")
    for name in CONTROL_PLANE:
        condition = ((services[name].get("depends_on") or {}).get("migrate") or {}).get("condition")
        if condition != "service_completed_successfully":
            found.append(f"{name}: must start after migrate completed (depends_on condition {condition})")
    if services["migrate"].get("restart") != "no":
        found.append("migrate: a one-shot must not restart")
    if (services["beat"].get("deploy") or {}).get("replicas", 1) != 1:
        found.append("beat: exactly one")
    if not any(m.split(":")[0] in volumes for m in services["postgres"].get("volumes") or []):
        found.append("postgres: its data must be on a named volume")
    example = (here / "compose.env.example").read_text()
    set_there = set(re.findall(r"^([A-Z_][A-Z0-9_]*)=", example, re.M))
    found += [f"compose.env.example does not set {var}" for var in sorted(REQUIRED_ENV - set_there)]
    return found, services


def main() -> int:
    found, services = problems()
    for problem in found:
        print("FAIL", problem, file=sys.stderr)
    if not found:
        print(f"compose references: {len(services)} services ({', '.join(services)}) hold together")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
