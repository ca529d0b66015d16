"""The control plane's worker API, over HTTPS with httpx.

``wait`` long-polls on a connection of its own (a second ``httpx.Client`` whose read timeout
outlasts the wait), so the waker thread waiting there never holds up the daemon's ``sync``."""

import ssl
import threading

import httpx

from klique.worker import __version__


class Unreachable(Exception):
    """No answer, a timeout, or a server error: try again later; the work keeps running."""


class Untrusted(Unreachable):
    """The server's TLS certificate did not verify against the CAs trusted here."""


class Refused(Exception):
    """401: the token is unknown, revoked or retired."""


class Rejected(Exception):
    """Any other 4xx: the request itself is wrong (or names another pool's task); retrying won't help.
    A 409 on a claim is the exception: the worker was marked lost and must heartbeat first."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def tls_verify(ca_bundle: str | None) -> ssl.SSLContext | bool:
    """httpx's ``verify``: a context trusting ``ca_bundle`` (PEM CA certificates), else True: the
    ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` of the environment, else certifi's CAs. OSError or
    ssl.SSLError when the file cannot be read."""
    return ssl.create_default_context(cafile=ca_bundle) if ca_bundle else True


def unreachable(error: Exception) -> Unreachable:
    """An Unreachable for an httpx error: Untrusted when a certificate did not verify."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            reason = cause.verify_message or cause.reason
            return Untrusted(f"the server's TLS certificate is not trusted: {reason}")
        cause = cause.__cause__ or cause.__context__
    return Unreachable(f"{type(error).__name__}: {error}")


# How much longer than the wait itself its request may take to answer before it is a timeout.
WAIT_MARGIN_S = 10.0


class ControlPlane:
    def __init__(
        self, server: str, *, verify: bool | ssl.SSLContext = True, timeout_s: float = 10, transport=None
    ):
        self._options = {
            "base_url": server.rstrip("/") + "/api/v1/workers/",
            "verify": verify,
            "transport": transport,
            "headers": {"User-Agent": f"klique-worker/{__version__}"},
        }
        self._http = httpx.Client(timeout=timeout_s, **self._options)
        self._waiting: httpx.Client | None = None
        self._waiting_lock = threading.Lock()
        self.token = ""

    @property
    def verify(self) -> bool | ssl.SSLContext:
        """How the control plane's certificate is checked (the session tunnel checks the same)."""
        return self._options["verify"]

    def close(self) -> None:
        self._http.close()
        with self._waiting_lock:
            if self._waiting is not None:
                self._waiting.close()

    def _post(self, path: str, body: dict, token: str) -> dict:
        try:
            answer = self._http.post(path, json=body, headers={"Authorization": f"Bearer {token}"})
        except httpx.HTTPError as error:
            raise unreachable(error) from error
        return self._answer(answer)

    @staticmethod
    def _answer(answer: httpx.Response) -> dict:
        if answer.status_code == 401:
            raise Refused(answer.text[:300])
        if answer.status_code in (408, 429) or answer.status_code >= 500:
            raise Unreachable(f"HTTP {answer.status_code}")
        if answer.status_code >= 400:
            raise Rejected(f"HTTP {answer.status_code}: {answer.text[:300]}", answer.status_code)
        try:
            return answer.json()
        except ValueError as error:
            raise Unreachable(f"not JSON: {answer.text[:100]!r}") from error

    def enrol(
        self, enrolment_token: str, *, hostname: str, gpus: str, mode: str, running: list[int] | None = None
    ) -> dict:
        """Exchange the enrolment token for this daemon's own; ``running`` names the tasks whose
        work an earlier daemon left here, which the control plane hands back as ``adopted``."""
        body = {"hostname": hostname, "gpus": gpus, "mode": mode, "version": __version__}
        if running:
            body["running"] = running
        answer = self._post("enrol", body, enrolment_token)
        self.token = answer["token"]
        return answer

    def heartbeat(self, body: dict) -> dict:
        return self._post("heartbeat", body, self.token)

    def claim(self, body: dict) -> list[dict]:
        return self._post("claim", body, self.token)["tasks"]

    def report(self, task_id: int, what: str, body: dict) -> dict:
        return self._post(f"tasks/{task_id}/{what}", body, self.token)

    def sync(self, body: dict) -> dict:
        """Reports, the heartbeat and a claim in one round trip (``POST sync``); a 404 (a control
        plane from before it) is a Rejected with status 404."""
        return self._post("sync", body, self.token)

    def wait(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` until the control plane says work was placed in the pool."""
        timeout = httpx.Timeout(10.0, read=timeout_s + WAIT_MARGIN_S)
        with self._waiting_lock:
            if self._waiting is None:
                self._waiting = httpx.Client(timeout=timeout, **self._options)
            http = self._waiting
        try:
            answer = http.post(
                "wait",
                json={"timeout_s": timeout_s},
                headers={"Authorization": f"Bearer {self.token}"},
                timeout=timeout,
            )
        except (httpx.HTTPError, RuntimeError) as error:  # RuntimeError: closed at shutdown
            raise unreachable(error) from error
        return bool(self._answer(answer).get("placed"))
