"""The HTTP side of the SDK: one authenticated ``httpx`` session with a Klique server's user API
(``/api/v1/``), its TLS trust, its retries and the mapping of refusals to ``ApiError``.

Retries (``retries`` times, short backoff): idempotent calls (GET, PUT, DELETE, and cancel, which
the server treats as idempotent) are repeated on connection errors and timeouts; the others (POST,
PATCH: submit, create and update a schedule) only when the connection was never made
(``ConnectError``, ``ConnectTimeout``), so nothing reached the server and nothing runs twice. A
DELETE that answers 404 on a retry after a lost reply was done by the first try: it counts as done.
"""

import re
import ssl
import time
from typing import Any, Self

import httpx

from klique.client import config
from klique.client.sdk.errors import (
    ERRORS_BY_STATUS,
    ApiError,
    CertificateNotTrusted,
    ConnectionFailed,
    KliqueError,
    NotLoggedIn,
    ServerError,
)

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
# Nothing reached the server: safe to repeat any request.
NEVER_CONNECTED = (httpx.ConnectError, httpx.ConnectTimeout)
# The request may have reached the server (or its reply was lost): safe to repeat only when
# repeating it changes nothing.
CONNECTION_LOST = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)


def tls_verify(ca_bundle: str | None) -> ssl.SSLContext | bool:
    """httpx's ``verify``: a context trusting ``ca_bundle`` (a PEM file of CA certificates), else
    True: the ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` of the environment, else certifi's CAs."""
    if not ca_bundle:
        return True
    try:
        return ssl.create_default_context(cafile=ca_bundle)
    except (OSError, ssl.SSLError) as error:
        raise KliqueError(f"Cannot use the CA bundle {ca_bundle}: {error}") from error


def certificate_error(error: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure behind a connection error, if that is what it was."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, ssl.SSLCertVerificationError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _flat_errors(body: dict, prefix: str = "") -> dict[str, list[str]]:
    """Field errors with nested fields joined by dots: a bulk submission's
    ``{"tasks": {"3": {"gpus": [...]}}}`` reads ``{"tasks.3.gpus": [...]}``."""
    errors: dict[str, list[str]] = {}
    for key, value in body.items():
        if isinstance(value, dict):
            errors.update(_flat_errors(value, f"{prefix}{key}."))
        else:
            errors[f"{prefix}{key}"] = value if isinstance(value, list) else [str(value)]
    return errors


def _error_from(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        # A page from the server or a proxy in front of it: its text, without the markup.
        text = re.sub(r"<(script|style)\b.*?</\1>|<title>.*?</title>|<[^>]*>", " ", response.text, flags=re.S)
        body = f"HTTP {response.status_code}: {' '.join(text.split())[:300] or response.reason_phrase}"
    errors: dict[str, list[str]] = {}
    if isinstance(body, dict) and set(body) != {"detail"}:
        errors = _flat_errors(body)
        message = "; ".join(f"{field}: {' '.join(map(str, reasons))}" for field, reasons in errors.items())
    elif isinstance(body, dict):
        message = str(body["detail"])
    else:
        message = str(body)
    status = response.status_code
    kind = ServerError if status >= 500 else ERRORS_BY_STATUS.get(status, ApiError)
    return kind(status, message, errors)


class Connection:
    """The base of ``Client``: the server, the token and the channel, with ``_request`` and
    ``_all_pages`` for the endpoint methods."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        channel: str = "sdk",
        timeout: float = 30.0,
        retries: int = 3,
        transport: httpx.BaseTransport | None = None,
        ca_bundle: str | None = None,
    ):
        if not url or not token:
            raise NotLoggedIn("Not logged in: run `klique login`, or set KLIQUE_URL and KLIQUE_TOKEN.")
        self.url = url.rstrip("/")
        self.retries = retries
        self._http = httpx.Client(
            base_url=self.url + "/api/v1/",
            headers={
                "Authorization": f"Bearer {token}",
                "X-Klique-Channel": channel,
                "Accept": "application/json",
                "User-Agent": "klique-client",
            },
            timeout=timeout,
            transport=transport,
            verify=tls_verify(ca_bundle),
        )

    @classmethod
    def from_config(cls, **kwargs) -> Self:
        """A client with the URL, token and CA bundle saved by ``klique login`` (or KLIQUE_URL,
        KLIQUE_TOKEN, KLIQUE_CA_BUNDLE); a ``ca_bundle`` given here wins."""
        stored = config.load()
        kwargs["ca_bundle"] = kwargs.get("ca_bundle") or stored["ca_bundle"]
        return cls(stored["url"], stored["token"], **kwargs)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _request(
        self, method: str, path: str, *, idempotent: bool | None = None, text: bool = False, **kwargs
    ) -> Any:
        """Send a request, retrying as the module says; ``idempotent`` defaults from the method.
        The answer's JSON, or with ``text`` its body as text."""
        method = method.upper()
        if idempotent is None:
            idempotent = method in IDEMPOTENT_METHODS
        retriable = CONNECTION_LOST if idempotent else NEVER_CONNECTED
        maybe_done = False  # an earlier try may have reached the server
        for attempt in range(self.retries + 1):
            try:
                response = self._http.request(method, path, **kwargs)
                break
            except httpx.TransportError as error:
                untrusted = certificate_error(error)
                if untrusted is not None:
                    raise CertificateNotTrusted(
                        f"The TLS certificate of {self.url} is not trusted "
                        f"({untrusted.verify_message or untrusted.reason}): pass --ca-bundle FILE "
                        "(or set KLIQUE_CA_BUNDLE or SSL_CERT_FILE) naming the CA that signed it."
                    ) from error
                if attempt == self.retries or not isinstance(error, retriable):
                    raise ConnectionFailed(f"Cannot reach Klique at {self.url}: {error}") from error
                maybe_done = maybe_done or not isinstance(error, NEVER_CONNECTED)
                time.sleep(min(0.25 * 2**attempt, 4))
        if method == "DELETE" and response.status_code == 404 and maybe_done:
            return None  # the first try deleted it; its reply was lost
        if response.status_code >= 400:
            raise _error_from(response)
        if text:
            return response.text
        return response.json() if response.content else None

    def _all_pages(self, path: str, params: dict | None = None) -> list[dict]:
        page = self._request("GET", path, params=params)
        rows = list(page["results"])
        while page["next"]:
            page = self._request("GET", page["next"])
            rows.extend(page["results"])
        return rows
