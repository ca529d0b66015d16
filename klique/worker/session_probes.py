"""Asking a session server over HTTP from the daemon's only thread: whether it answers yet
(``answers``) and a Jupyter server's own status (``jupyter_status``), each request bounded by a
wall-clock deadline however slowly the server answers."""

import json
import time

import httpcore

# Wall-clock limits of one request to a session server, from connecting to the last byte read: the
# daemon asks from its only thread, so a server that answers slowly must not hold it.
PROBE_DEADLINE_S = 2.0
STATUS_DEADLINE_S = 2.0
STATUS_MAX_BYTES = 64 * 1024
# Counted as "the server answers": it is up even when it wants a login.
UP_STATUSES = {401, 403}


class Expired(httpcore.ReadTimeout):
    """A request to a session server outran its wall-clock deadline."""


class _UntilStream(httpcore.NetworkStream):
    """A connection whose every read and write waits at most until the deadline."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: float):
        self.stream, self.deadline = stream, deadline

    def left(self, timeout: float | None) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise Expired("deadline passed")
        return remaining if timeout is None else min(timeout, remaining)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.stream.read(max_bytes, self.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, self.left(timeout))

    def close(self) -> None:
        self.stream.close()

    def get_extra_info(self, info: str):
        return self.stream.get_extra_info(info)


class _UntilBackend(httpcore.SyncBackend):
    def __init__(self, deadline: float):
        self.deadline = deadline

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise httpcore.ConnectTimeout("deadline passed")
        timeout = remaining if timeout is None else min(timeout, remaining)
        stream = super().connect_tcp(host, port, timeout, local_address, socket_options)
        return _UntilStream(stream, self.deadline)


def deadline_pool(seconds: float) -> httpcore.ConnectionPool:
    """An HTTP connection pool whose requests end ``seconds`` of wall clock after it is made, however
    slowly the server answers (httpx's and httpcore's own timeouts are per read: a trickle of bytes
    never trips them). One connection, closed after each request, so that it is never counted as a
    user's."""
    return httpcore.ConnectionPool(
        network_backend=_UntilBackend(time.monotonic() + seconds), max_keepalive_connections=0, retries=0
    )


def answers(url: str, headers: dict | None = None, deadline_s: float = PROBE_DEADLINE_S) -> bool:
    """Whether the server answers at ``url``: a 2xx or 3xx, or a 401/403 (up, wants a login),
    decided from the status line; its body is not read."""
    try:
        with deadline_pool(deadline_s) as pool, pool.stream("GET", url, headers=headers or {}) as answer:
            status = answer.status
    except (
        httpcore.TimeoutException,
        httpcore.NetworkError,
        httpcore.ProtocolError,
        httpcore.UnsupportedProtocol,
    ):
        return False
    return 200 <= status < 400 or status in UP_STATUSES


def jupyter_status(
    url: str, token: str, deadline_s: float = STATUS_DEADLINE_S, max_bytes: int = STATUS_MAX_BYTES
) -> dict | None:
    """A Jupyter server's ``api/status`` (``last_activity``, ``connections``, ``kernels``), read
    with the token, at most ``max_bytes``; this request does not count as activity. None when it
    does not answer in time or answers something else."""
    body = bytearray()
    try:
        with (
            deadline_pool(deadline_s) as pool,
            pool.stream("GET", url, headers={"Authorization": f"token {token}"}) as answer,
        ):
            if answer.status != 200:
                return None
            for chunk in answer.iter_stream():
                body += chunk
                if len(body) > max_bytes:
                    return None
        status = json.loads(body)
    except (
        httpcore.TimeoutException,
        httpcore.NetworkError,
        httpcore.ProtocolError,
        httpcore.UnsupportedProtocol,
        ValueError,
    ):
        return None
    return status if isinstance(status, dict) else None
