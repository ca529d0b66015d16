"""The control plane's worker API, over HTTPS with httpx."""

import httpx

from klique.worker import __version__


class Unreachable(Exception):
    """No answer, a timeout, or a server error: try again later; the work keeps running."""


class Refused(Exception):
    """401: the token is unknown, revoked or retired."""


class Rejected(Exception):
    """Any other 4xx: the request itself is wrong (or names another pool's task); retrying won't help.
    A 409 on a claim is the exception: the worker was marked lost and must heartbeat first."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class ControlPlane:
    def __init__(self, server: str, *, verify: bool | str = True, timeout_s: float = 10, transport=None):
        self._http = httpx.Client(
            base_url=server.rstrip("/") + "/api/v1/workers/",
            verify=verify,
            timeout=timeout_s,
            transport=transport,
            headers={"User-Agent": f"klique-worker/{__version__}"},
        )
        self.token = ""

    def close(self) -> None:
        self._http.close()

    def _post(self, path: str, body: dict, token: str) -> dict:
        try:
            answer = self._http.post(path, json=body, headers={"Authorization": f"Bearer {token}"})
        except httpx.HTTPError as error:
            raise Unreachable(f"{type(error).__name__}: {error}") from error
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
