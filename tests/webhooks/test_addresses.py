"""A webhook goes only to globally routable addresses (docs/governance.md, "Webhooks"): anything
not ``is_global`` (loopback, private, link-local, carrier-grade NAT 100.64.0.0/10, where one
cloud's metadata service answers at 100.100.100.200) is refused when the webhook is saved and again
when it is sent; at sending the host is resolved once, every address checked, and the delivery
connects to the address checked (no second lookup, so DNS rebinding cannot send it inside)."""

import socket

import pytest
from django.core.exceptions import ValidationError

from apps.webhooks.models import Webhook, WebhookDelivery
from tests.factories import GroupFactory

REAL_GETADDRINFO = socket.getaddrinfo
PUBLIC = "93.184.215.14"


@pytest.fixture
def team(db):
    return GroupFactory(kind="team", name="Detection")


@pytest.fixture
def send(django_capture_on_commit_callbacks):
    from apps.webhooks import services

    def run(group):
        with django_capture_on_commit_callbacks(execute=True):
            services.enqueue_for(group, "budget_alert", "Title", "Text", "")
        return WebhookDelivery.objects.get()

    return run


class Resolver:
    """``socket.getaddrinfo`` for one name: each lookup of it answers the next address of
    ``answers`` (the last one from then on); every other host resolves as usual."""

    def __init__(self, name: str, *answers: str):
        self.name, self.answers, self.lookups = name, list(answers), 0

    def __call__(self, host, port, *args, **kwargs):
        if host != self.name:
            return REAL_GETADDRINFO(host, port, *args, **kwargs)
        address = self.answers[min(self.lookups, len(self.answers) - 1)]
        self.lookups += 1
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (address, port or 0))]


@pytest.fixture
def connections(monkeypatch):
    """Every TCP connection the sender opens, refused instead of leaving the machine."""
    opened = []

    def refuse(address, *args, **kwargs):
        opened.append(address)
        raise ConnectionRefusedError("not in the tests")

    monkeypatch.setattr(socket, "create_connection", refuse)
    return opened


@pytest.mark.parametrize(
    "url",
    [
        "https://100.64.0.1/hook",  # carrier-grade NAT
        "https://100.100.100.200/latest/meta-data/",  # a cloud's metadata service inside it
        "https://192.0.2.10/hook",  # documentation ranges are not routable either
        "https://[::ffff:127.0.0.1]/hook",
        "https://[fd00::1]/hook",
    ],
)
def test_an_address_that_is_not_globally_routable_is_refused_at_saving(team, url):
    with pytest.raises(ValidationError, match="internal address") as refused:
        Webhook(group=team, url=url).full_clean()
    assert "url" in refused.value.message_dict


@pytest.mark.parametrize("address", ["100.64.0.1", "100.100.100.200"])
def test_a_name_that_resolves_inside_by_the_time_it_is_sent_is_refused_at_sending(
    team, send, monkeypatch, connections, address
):
    monkeypatch.setattr(socket, "getaddrinfo", Resolver("hooks.example.com", PUBLIC, address))
    webhook = Webhook(group=team, url="https://hooks.example.com/hook")
    webhook.full_clean()  # resolves to PUBLIC: saved
    webhook.save()
    delivery = send(team)
    assert delivery.state == "failed" and "internal address" in delivery.last_error
    assert address in delivery.last_error and connections == []


def test_every_address_a_name_resolves_to_is_checked(team, monkeypatch):
    def two(host, port, *args, **kwargs):
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", (PUBLIC, 443)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("100.100.100.200", 443)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", two)
    with pytest.raises(ValidationError, match="100.100.100.200"):
        Webhook(group=team, url="https://hooks.example.com/hook").full_clean()


def test_the_delivery_connects_to_the_address_checked_not_to_a_second_lookup(
    team, send, monkeypatch, connections, settings
):
    """DNS rebinding: public when checked, 127.0.0.1 at any later lookup. Each attempt resolves
    once: the first connects to the public address; the retries are refused before connecting."""
    resolver = Resolver("hooks.example.com", PUBLIC, "127.0.0.1")
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    Webhook.objects.create(group=team, url="https://hooks.example.com:8443/hook")
    delivery = send(team)
    assert connections == [(PUBLIC, 8443)]
    assert resolver.lookups == delivery.attempts == settings.WEBHOOK_MAX_ATTEMPTS
    assert delivery.state == "failed" and "internal address (127.0.0.1)" in delivery.last_error


def test_a_real_receiver_gets_the_request_at_the_resolved_address_with_the_hosts_name(
    team, send, monkeypatch, receiver, settings
):
    """A development host (``WEBHOOK_HTTP_HOSTS``), resolved once: to the receiver on 127.0.0.1,
    later to 127.0.0.2 where nothing listens. The receiver sees the name in ``Host``."""
    settings.WEBHOOK_HTTP_HOSTS = ["receiver.test"]
    resolver = Resolver("receiver.test", "127.0.0.1", "127.0.0.2")
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    port = receiver.server.server_port
    Webhook.objects.create(group=team, url=f"http://receiver.test:{port}/hook")
    delivery = send(team)
    assert delivery.state == "delivered"
    (request,) = receiver.requests
    assert request["path"] == "/hook" and request["headers"]["Host"] == f"receiver.test:{port}"
    assert resolver.lookups == 1


@pytest.fixture
def tls_receiver(tmp_path, monkeypatch):
    """A real HTTPS receiver on 127.0.0.1 with a self-signed certificate for ``receiver.test``,
    trusted through ``SSL_CERT_FILE``; it records the ``Host`` of each POST."""
    import ssl
    import subprocess
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=receiver.test",
        ]
        + ["-addext", "subjectAltName=DNS:receiver.test", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    hosts = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            hosts.append(self.headers["Host"])
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_port, hosts
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("name", "delivered"), [("receiver.test", True), ("impostor.test", False)])
def test_over_https_the_certificate_is_checked_against_the_name_not_the_address(
    team, send, monkeypatch, settings, tls_receiver, name, delivered
):
    port, hosts = tls_receiver
    settings.WEBHOOK_HTTP_HOSTS = [name]
    monkeypatch.setattr(socket, "getaddrinfo", Resolver(name, "127.0.0.1"))
    Webhook.objects.create(group=team, url=f"https://{name}:{port}/hook")
    delivery = send(team)
    if delivered:
        assert delivery.state == "delivered" and hosts == [f"receiver.test:{port}"]
    else:
        assert delivery.state == "failed" and "CERTIFICATE_VERIFY_FAILED" in delivery.last_error
        assert hosts == []
