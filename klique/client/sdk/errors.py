"""The SDK's exceptions: ``KliqueError`` for anything that went wrong, ``ApiError`` and its
subclasses for the server's refusals by HTTP status."""


class KliqueError(Exception):
    """Anything that went wrong talking to Klique."""


class NotLoggedIn(KliqueError):
    """No server URL or token: run ``klique login`` or set KLIQUE_URL and KLIQUE_TOKEN."""


class ConnectionFailed(KliqueError):
    """The server could not be reached (after the retries)."""


class CertificateNotTrusted(ConnectionFailed):
    """The server's TLS certificate did not verify against the CAs trusted here."""


class WaitTimeout(KliqueError):
    """``wait`` gave up before the task ended."""


class ApiError(KliqueError):
    """The server refused a request: ``status``, its ``message`` and, for 400, the field ``errors``."""

    def __init__(self, status: int, message: str, errors: dict[str, list[str]] | None = None):
        super().__init__(message)
        self.status, self.message, self.errors = status, message, errors or {}


class InvalidRequest(ApiError):
    """400: bad input; ``errors`` maps each field to the reasons."""


class AuthenticationFailed(ApiError):
    """401: no token, or a token that is unknown, revoked or expired."""


class PermissionDenied(ApiError):
    """403: the user may see this but not do it."""


class NotFound(ApiError):
    """404: it does not exist, or the user may not see it."""


class ServerError(ApiError):
    """5xx."""


class BulkUnsupported(NotFound):
    """The server has no bulk submission endpoint (an older Klique)."""


ERRORS_BY_STATUS = {400: InvalidRequest, 401: AuthenticationFailed, 403: PermissionDenied, 404: NotFound}
