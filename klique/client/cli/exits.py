"""The CLI's exit codes (documented in ``klique --help`` and docs/channels.md) and which SDK
error ends in which."""

from klique.client.sdk.errors import (
    AuthenticationFailed,
    ConnectionFailed,
    InvalidRequest,
    NotFound,
    NotLoggedIn,
    PermissionDenied,
    ServerError,
    WaitTimeout,
)

OK, FAILED, USAGE, AUTH, DENIED, INVALID, UNREACHABLE, SERVER, TASK_CANCELED, TIMED_OUT = range(10)
TASK_TIMED_OUT = 10  # with --wait, the task reached its time limit
PIPE_CLOSED = 128 + 13  # killed by SIGPIPE, as the shell reports coreutils' ``ls | head``

EXIT_BY_ERROR = [
    (NotLoggedIn, AUTH),
    (AuthenticationFailed, AUTH),
    (PermissionDenied, DENIED),
    (NotFound, DENIED),
    (InvalidRequest, INVALID),
    (ServerError, SERVER),
    (ConnectionFailed, UNREACHABLE),
    (WaitTimeout, TIMED_OUT),
]
