"""A worker and the CLI over TLS with a private CA: nginx with the production site
(deploy/nginx/klique.conf, its paths and ports moved into a temp folder) terminates TLS in front
of the live server, with a server certificate for 127.0.0.1 and localhost signed by a CA made
here. The real ``klique-worker`` enrols and syncs through it and the real ``klique`` logs in and
lists resources, trusting that CA by ``--ca-bundle`` and by ``SSL_CERT_FILE``; trusting another
CA instead, both refuse with a clear message, a nonzero exit and no traceback.

Needs nginx (Debian's ``nginx``): without it the tests skip, and fail when ``CI`` is set."""

import datetime
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.utils import timezone

from apps.accounts import services as accounts
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken, Worker
from klique.settings.base import BASE_DIR
from tests.factories import PoolFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

WORKER = str(Path(sys.executable).with_name("klique-worker"))
KLIQUE = str(Path(sys.executable).with_name("klique"))


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_ca(folder: Path, name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate, Path]:
    """A CA key and self-signed certificate; the certificate's PEM file."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    path = folder / f"{name}.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert, path


def make_server_cert(folder: Path, ca_key, ca_cert) -> tuple[Path, Path]:
    """A server certificate for 127.0.0.1 and localhost signed by the CA: (chain, key) files."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    chain, key_file = folder / "tls.crt", folder / "tls.key"
    chain.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return chain, key_file


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def nginx_site(folder: Path, upstream_port: int, tls_port: int, http_port: int) -> Path:
    """deploy/nginx/klique.conf and its locations with paths and ports in ``folder``: the
    production site, as deploy/check.sh runs it."""
    (folder / "snippets").mkdir()
    (folder / "log").mkdir()
    site = (BASE_DIR / "deploy/nginx/klique.conf").read_text()
    for old, new in [
        ("/etc/nginx/snippets/", f"{folder}/snippets/"),
        ("/etc/ssl/klique/", f"{folder}/"),
        ("/var/log/nginx/", f"{folder}/log/"),
        ("server 127.0.0.1:8000", f"server 127.0.0.1:{upstream_port}"),
        ("listen 443 ssl http2;", f"listen 127.0.0.1:{tls_port} ssl http2;"),
        ("listen [::]:443 ssl http2;", ""),
        ("listen [::]:80;", ""),
        ("listen 80;", f"listen 127.0.0.1:{http_port};"),
    ]:
        assert old in site, old
        site = site.replace(old, new)
    (folder / "site.conf").write_text(site)
    locations = (BASE_DIR / "deploy/nginx/klique-locations.conf").read_text()
    (folder / "snippets/klique-locations.conf").write_text(
        locations.replace("/opt/klique/staticfiles/", f"{folder}/static/")
    )
    temp = " ".join(
        f"{kind}_temp_path {folder}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers read the temp folder (mode 700)
    conf = folder / "nginx.conf"
    conf.write_text(
        f"{user}pid {folder}/nginx.pid;\nerror_log {folder}/log/error.log;\nevents {{}}\n"
        f"http {{\n  include /etc/nginx/mime.types;\n  {temp}\n  include {folder}/site.conf;\n}}\n"
    )
    return conf


@pytest.fixture
def tls(live_server, tmp_path):
    """nginx with a private CA's certificate in front of the live server: the HTTPS URL, the CA
    file, and another CA's file."""
    nginx = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)
    if nginx is None:
        if os.environ.get("CI"):
            pytest.fail("nginx is missing: apt-get install nginx")
        pytest.skip("nginx is not installed (Debian: apt-get install nginx)")
    folder = tmp_path / "nginx"
    folder.mkdir()
    ca_key, ca_cert, ca_file = make_ca(tmp_path, "klique-test-ca")
    _, _, other_ca = make_ca(tmp_path, "another-ca")
    make_server_cert(folder, ca_key, ca_cert)
    upstream = int(live_server.url.rsplit(":", 1)[1])
    tls_port, http_port = free_port(), free_port()
    while http_port == tls_port:  # a port just closed may be handed out again
        http_port = free_port()
    conf = nginx_site(folder, upstream, tls_port, http_port)
    process = subprocess.Popen(
        [nginx, "-c", str(conf), "-g", "daemon off;"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", tls_port), timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                output = process.stdout.read().decode(errors="replace") if process.poll() is not None else ""
                process.kill()
                pytest.fail(f"nginx did not start: {output}")
            time.sleep(0.1)
    try:
        yield {"url": f"https://127.0.0.1:{tls_port}", "ca": str(ca_file), "other_ca": str(other_ca)}
    finally:
        process.send_signal(signal.SIGQUIT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("KLIQUE_") and not k.startswith("SSL_CERT_")
    }
    return {**env, **extra}


def enrolment_token() -> str:
    pool = PoolFactory(name="tls-pool")
    return pools.issue_enrolment_token(EnrolmentToken(pool=pool, name="tls"), now=timezone.now())


def run_worker(tmp_path: Path, url: str, hostname: str, *flags: str, **env: str) -> subprocess.Popen:
    args = [WORKER, "--server", url, "--gpus", "1", "--hostname", hostname, *flags]
    args += ["--state-dir", str(tmp_path / hostname), "--poll-min", "0.2", "--poll-max", "1", "--tick", "0.1"]
    log = (tmp_path / f"{hostname}.log").open("wb")
    return subprocess.Popen(args, env=clean_env(**env), stdout=log, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def synced_twice(hostname: str, timeout: float = 30) -> Worker:
    """The worker enrolled under ``hostname`` once its heartbeat has moved on after enrolment."""
    deadline = time.monotonic() + timeout
    first = None
    while time.monotonic() < deadline:
        worker = Worker.objects.filter(hostname=hostname).first()
        if worker is not None and worker.last_heartbeat is not None:
            first = first or worker.last_heartbeat
            if worker.last_heartbeat > first:
                return worker
        time.sleep(0.2)
    raise AssertionError(f"{hostname} did not enrol and heartbeat through nginx")


@pytest.mark.parametrize("trust", ["--ca-bundle", "SSL_CERT_FILE", "KLIQUE_CA_BUNDLE"])
def test_the_worker_enrols_and_syncs_through_nginx_trusting_the_private_ca(tls, tmp_path, trust):
    token = enrolment_token()
    hostname = f"tls-{trust.strip('-').lower().replace('_', '-')}"  # an RFC 1123 host name
    flags = ("--ca-bundle", tls["ca"]) if trust == "--ca-bundle" else ()
    env = {} if flags else {trust: tls["ca"]}
    worker = run_worker(tmp_path, tls["url"], hostname, *flags, KLIQUE_ENROLMENT_TOKEN=token, **env)
    try:
        synced_twice(hostname)
    finally:
        code = stop(worker)
    output = (tmp_path / f"{hostname}.log").read_text()
    assert code == 0, output
    assert "enrolled" in output and "unreachable" not in output and "Traceback" not in output


def test_the_worker_refuses_a_certificate_from_another_ca(tls, tmp_path):
    token = enrolment_token()
    worker = run_worker(
        tmp_path, tls["url"], "tls-wrong", "--ca-bundle", tls["other_ca"], KLIQUE_ENROLMENT_TOKEN=token
    )
    try:
        code = worker.wait(timeout=30)
    finally:
        stop(worker)
    output = (tmp_path / "tls-wrong.log").read_text()
    assert code == 4, output
    assert "certificate is not trusted" in output and "--ca-bundle" in output, output
    assert "Traceback" not in output
    assert not Worker.objects.filter(hostname="tls-wrong").exists()
    # Without any CA of its own the system's (certifi's) CAs do not know the private one either.
    plain = run_worker(tmp_path, tls["url"], "tls-plain", KLIQUE_ENROLMENT_TOKEN=token)
    assert plain.wait(timeout=30) == 4


def klique(tmp_path: Path, *args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess:
    config = str(tmp_path / "klique" / "config.json")
    return subprocess.run(
        [KLIQUE, *args],
        env=clean_env(KLIQUE_CONFIG=config, **env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_cli_logs_in_and_lists_through_nginx_and_refuses_another_ca(tls, tmp_path):
    user = UserFactory(username="tls-user")
    _, api_token = accounts.create_api_token(user=user, name="tls")
    url = tls["url"]

    wrong = klique(
        tmp_path, "login", "--url", url, "--token", "-", "--ca-bundle", tls["other_ca"], stdin=api_token
    )
    assert wrong.returncode == 6, wrong.stderr
    assert "certificate" in wrong.stderr and "not trusted" in wrong.stderr and "--ca-bundle" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    assert not (tmp_path / "klique" / "config.json").exists()
    untrusted = klique(tmp_path, "login", "--url", url, "--token", "-", stdin=api_token)
    assert (
        untrusted.returncode == 6
        and "not trusted" in untrusted.stderr
        and "Traceback" not in untrusted.stderr
    )

    # SSL_CERT_FILE alone: the login works and stores no CA file.
    by_env = klique(tmp_path, "login", "--url", url, "--token", "-", stdin=api_token, SSL_CERT_FILE=tls["ca"])
    assert by_env.returncode == 0, by_env.stderr
    assert "tls-user" in by_env.stdout
    assert klique(tmp_path, "resources", SSL_CERT_FILE=tls["ca"]).returncode == 0
    refused = klique(tmp_path, "resources")
    assert refused.returncode == 6 and "not trusted" in refused.stderr and "Traceback" not in refused.stderr

    # --ca-bundle at login is stored: later commands trust it without repeating it.
    by_flag = klique(
        tmp_path, "login", "--url", url, "--token", "-", "--ca-bundle", tls["ca"], stdin=api_token
    )
    assert by_flag.returncode == 0, by_flag.stderr
    listed = klique(tmp_path, "resources", "--json")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == "[]"
    assert klique(tmp_path, "--ca-bundle", tls["other_ca"], "ls").returncode == 6
    assert klique(tmp_path, "ls", "--ca-bundle", tls["ca"], "--json").returncode == 0
