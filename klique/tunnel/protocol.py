"""The frames of a session tunnel: many browser requests and WebSockets over the one WebSocket a
worker daemon keeps open to the session gateway (docs/sessions.md, "Through the control plane").

Each frame is one binary WebSocket message: a stream id (4 bytes, big-endian), a frame type (1
byte) and a payload. The gateway opens streams (``HTTP``, ``WS``); both sides send ``DATA`` or
``TEXT``/``BINARY`` on them; ``END`` ends a request or response body, ``CLOSE`` a WebSocket and
``RESET`` any stream that failed. Heads (``HTTP``, ``RESPONSE``, ``WS``, ``ACCEPTED``, ``CLOSE``,
``RESET``) carry JSON.
"""

import json
import struct
from dataclasses import dataclass

HEAD = struct.Struct("!IB")
CHUNK = 64 * 1024  # the most one DATA frame carries

HTTP = 1  # gateway -> worker: {"session", "method", "path", "headers"}
RESPONSE = 2  # worker -> gateway: {"status", "headers"}
DATA = 3  # either way: body bytes
END = 4  # either way: the body is over
WS = 5  # gateway -> worker: {"session", "path", "headers", "protocols"}
ACCEPTED = 6  # worker -> gateway: {"protocol"}
TEXT = 7  # either way: a WebSocket text message (UTF-8)
BINARY = 8  # either way: a WebSocket binary message
CLOSE = 9  # either way: {"code"}; the WebSocket is over
RESET = 10  # either way: {"status", "error"}; the stream failed
JSON_FRAMES = frozenset({HTTP, RESPONSE, WS, ACCEPTED, CLOSE, RESET})
TYPES = frozenset({HTTP, RESPONSE, DATA, END, WS, ACCEPTED, TEXT, BINARY, CLOSE, RESET})

# Never forwarded either way: they describe one hop, not the request.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-accept",
        "sec-websocket-protocol",
    }
)


class FrameError(ValueError):
    """A frame the other side should not have sent."""


@dataclass(frozen=True)
class Frame:
    stream: int
    type: int
    payload: bytes = b""

    def json(self) -> dict:
        try:
            value = json.loads(self.payload)
        except ValueError as error:
            raise FrameError(f"frame {self.type} on stream {self.stream} is not JSON") from error
        if not isinstance(value, dict):
            raise FrameError(f"frame {self.type} on stream {self.stream} is not a JSON object")
        return value


def encode(stream: int, kind: int, payload: bytes | str | dict = b"") -> bytes:
    if isinstance(payload, dict):
        payload = json.dumps(payload, separators=(",", ":")).encode()
    elif isinstance(payload, str):
        payload = payload.encode()
    return HEAD.pack(stream, kind) + payload


def decode(message: bytes) -> Frame:
    if len(message) < HEAD.size:
        raise FrameError("a frame shorter than its head")
    stream, kind = HEAD.unpack_from(message)
    if kind not in TYPES:
        raise FrameError(f"unknown frame type {kind}")
    return Frame(stream, kind, bytes(message[HEAD.size :]))


def forwarded(headers, drop: frozenset[str] = frozenset()) -> list[list[str]]:
    """The end-to-end headers of a request or response, as pairs (a name may repeat)."""
    skip = HOP_BY_HOP | drop
    return [[name, value] for name, value in headers.items() if name.lower() not in skip]


def chunks(body: bytes):
    for start in range(0, len(body), CHUNK):
        yield body[start : start + CHUNK]
