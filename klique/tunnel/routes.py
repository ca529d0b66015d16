"""Where a session's server answers on its worker, as the tunnel's agent reaches it: the only
sessions and paths a tunnel stream may reach (the daemon builds these, klique/worker/sessions.py)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    """Where a session's server answers on this worker."""

    local: str  # http://127.0.0.1:41000
    base_url: str  # /sessions/12/
    token: str = ""  # sent as "Authorization: token ..." (Jupyter)
    strip_base_url: bool = False  # the server serves at / (e.g. noVNC's websockify)

    def path(self, path: str) -> str | None:
        """The path the server is asked for, or None when it is outside the session."""
        if not (path + "/").startswith(self.base_url) or ".." in path.split("?", 1)[0].split("/"):
            return None
        return "/" + path[len(self.base_url) :] if self.strip_base_url else path

    def headers(self, pairs) -> list[tuple[str, str]]:
        """The request's headers as the server gets them: the Origin its own (the gateway checked
        the browser's), and the session's credential added."""
        headers = []
        for name, value in pairs:
            if str(name).lower() == "authorization":
                continue
            headers.append((str(name), self.local if str(name).lower() == "origin" else str(value)))
        if self.token:
            headers.append(("Authorization", f"token {self.token}"))
        return headers
