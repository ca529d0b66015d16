"""The image builds behind a TLS-inspecting proxy or offline (deploy/docker: a package index, CA
certificates, a wheelhouse), read from the Dockerfiles, and ``deploy/check.sh --images`` failing,
not passing, when its subject is missing, with nothing left behind (a fake ``podman`` that builds
nothing: the real builds need a base image this machine cannot pull)."""

import os
import re
import shutil
import subprocess

import pytest

from klique.settings.base import BASE_DIR

DOCKERFILES = [BASE_DIR / "deploy/docker/Dockerfile", BASE_DIR / "deploy/docker/Dockerfile.worker"]
CHECK = BASE_DIR / "deploy/check.sh"


def instructions(path) -> list[tuple[str, str, str]]:
    """(stage, instruction, arguments) of a Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    stage, found = "", []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            stage = rest.split(" AS ")[-1].strip()
        found.append((stage, word.upper(), rest.strip()))
    return found


def env_of(steps, stage: str) -> str:
    return " ".join(rest for s, word, rest in steps if s == stage and word == "ENV")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_builder_takes_an_index_ca_certificates_and_a_wheelhouse(dockerfile):
    steps = instructions(dockerfile)
    args = {rest.split("=")[0] for stage, word, rest in steps if stage == "builder" and word == "ARG"}
    assert {"PIP_INDEX_URL", "CA_CERTIFICATES", "WHEELHOUSE"} <= args
    runs = [rest for stage, word, rest in steps if stage == "builder" and word == "RUN"]
    copies = [rest for stage, word, rest in steps if word == "COPY"]
    # The CAs go into the system's trust before anything is downloaded...
    ca_copy = next(
        i for i, (s, w, r) in enumerate(steps) if w == "COPY" and r.startswith("${CA_CERTIFICATES}/")
    )
    update = next(i for i, (s, w, r) in enumerate(steps) if w == "RUN" and "update-ca-certificates" in r)
    pip = next(i for i, (s, w, r) in enumerate(steps) if w == "RUN" and "pip wheel" in r)
    assert ca_copy < update < pip
    assert "/usr/local/share/ca-certificates/klique/" in steps[ca_copy][2]
    # ... and pip, requests and httpx use that bundle while building and at run time.
    for stage in ("builder", "runtime"):
        env = env_of(steps, stage)
        for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
            assert f"{name}=/etc/ssl/certs/ca-certificates.crt" in env, (stage, name)
    assert "PIP_CERT=/etc/ssl/certs/ca-certificates.crt" in env_of(steps, "builder")
    runtime = [(w, r) for s, w, r in steps if s == "runtime"]
    assert (
        "COPY",
        "--from=builder /usr/local/share/ca-certificates/klique/ /usr/local/share/ca-certificates/klique/",
    ) in runtime
    assert ("RUN", "update-ca-certificates") in runtime
    # A wheelhouse with wheels in it: no index at all.
    assert any(c.startswith("${WHEELHOUSE}/ /wheelhouse/") for c in copies)
    offline = next(r for r in runs if "pip wheel" in r)
    assert re.search(
        r"if ls /wheelhouse/\*\.whl .*then export PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheelhouse; fi", offline
    )
    # The default folders exist in the build context (COPY needs them) and are not ignored.
    for folder in ("deploy/docker/ca-certificates", "deploy/docker/wheelhouse"):
        assert (BASE_DIR / folder / "README.md").is_file()
    ignored = (BASE_DIR / ".dockerignore").read_text().split()
    assert not any(entry in ("deploy", "deploy/docker", "deploy/docker/*") for entry in ignored)


def test_the_ca_and_the_wheelhouse_steps_work_in_a_shell(tmp_path):
    """The RUN lines themselves, in a Debian-like tree: only *.crt files stay; a wheelhouse with
    wheels sets pip's no-index variables, an empty one does not."""
    steps = instructions(DOCKERFILES[1])
    ca_run = next(
        r for s, w, r in steps if w == "RUN" and r.startswith("find /usr/local/share/ca-certificates")
    )
    certs = tmp_path / "certs"
    certs.mkdir()
    for name in ("proxy.crt", "README.md", "notes.txt"):
        (certs / name).write_text("x")
    script = ca_run.replace("/usr/local/share/ca-certificates/klique", str(certs)).replace(
        "update-ca-certificates", "true"
    )
    subprocess.run(["sh", "-c", script], check=True)
    assert sorted(p.name for p in certs.iterdir()) == ["proxy.crt"]
    pip_run = next(r for s, w, r in steps if w == "RUN" and "pip wheel" in r)
    condition = pip_run.split("&&")[0].replace("/wheelhouse/", f"{tmp_path}/wheels/")
    (tmp_path / "wheels").mkdir()
    probe = condition + '; echo "${PIP_NO_INDEX:-index}"'
    assert subprocess.run(["sh", "-c", probe], capture_output=True, text=True).stdout.strip() == "index"
    (tmp_path / "wheels" / "six-1.16.0-py2.py3-none-any.whl").write_text("")
    assert subprocess.run(["sh", "-c", probe], capture_output=True, text=True).stdout.strip() == "1"


FAKE_PODMAN = """#!/bin/sh
# podman whose builds "succeed" without making an image, as a broken build cache or a wrong tag would.
echo "$*" >>"$PODMAN_LOG"
case "$1" in
  build|rm) exit 0 ;;
  image) if [ "$2" = exists ]; then exit 1; fi ;;
esac
echo "Error: localhost/klique-worker:check: image not known" >&2
exit 125
"""


def test_check_images_fails_when_the_images_are_missing_and_leaves_no_container(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("bash is needed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    podman = bin_dir / "podman"
    podman.write_text(FAKE_PODMAN)
    podman.chmod(0o755)
    log = tmp_path / "podman.log"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PODMAN_LOG": str(log),
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",
        "REDIS_URL": "redis://127.0.0.1:1/0",
    }
    done = subprocess.run(
        ["bash", str(CHECK), "--images-only"], env=env, capture_output=True, text=True, timeout=120
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "ok: the worker image has no Django" not in out
    assert "FAIL: the worker image's Django check did not run" in out
    assert "FAIL: podman build deploy/docker/Dockerfile: no image localhost/klique:check" in out
    assert "FAIL: podman build deploy/docker/Dockerfile.worker: no image localhost/klique-worker:check" in out
    assert "all checks passed" not in out
    calls = log.read_text().splitlines()
    # The containers of the step are removed on the way in and on the way out.
    removals = [c for c in calls if c.startswith("rm -f klique-check-web klique-check-worker")]
    assert len(removals) == 2 and calls[-1] == removals[1], calls


def test_check_images_without_podman_fails(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "mktemp", "chmod", "rm", "dirname", "cat", "printf"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    done = subprocess.run(
        [shutil.which("bash"), str(CHECK), "--images-only"],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL: --images: podman is not installed" in done.stdout
