"""A real HTTP receiver on 127.0.0.1 for the webhook tests, and deliveries sent in-process."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Receiver:
    """Records each POST (path, headers, JSON body) and answers the scripted status codes in turn,
    then 200."""

    def __init__(self):
        self.requests: list[dict] = []
        self.script: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "raw": raw, "body": json.loads(raw)}
                )
                status = receiver.script.pop(0) if receiver.script else 200
                answer = b"ok" if status < 300 else b"server error"
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.server.server_port}{path}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def send_inline(settings):
    """No Celery worker runs in the tests: deliveries run their Celery task in-process (eagerly),
    retries included, as without a broker."""
    settings.WEBHOOK_SEND_INLINE = True
