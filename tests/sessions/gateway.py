"""A real ``klique-gateway`` in the test's process (its own thread and event loop) in front of the
live server, for the session-tunnel tests."""

import asyncio
import socket
import sys
import threading

from aiohttp import web

from klique.tunnel.gateway import Gateway


class RunningGateway:
    def __init__(self, control_plane: str, host: str = "127.0.0.1"):
        with socket.socket() as probe:
            probe.bind((host, 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self.gateway = Gateway(control_plane, public_url=self.url)
        self.loop = asyncio.new_event_loop()
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(host,), daemon=True)
        self.thread.start()
        assert self.started.wait(10), "the gateway did not start"

    def _run(self, host: str) -> None:
        asyncio.set_event_loop(self.loop)
        self.runner = web.AppRunner(self.gateway.app(), access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.TCPSite(self.runner, host, self.port).start())
        self.started.set()
        self.loop.run_forever()

    def tunnels(self) -> set[int]:
        return set(self.gateway.tunnels)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def desktop_kind():
    """The desktop session kind as the demo offers it (klique-desktop, noVNC at the session's root)."""
    from apps.sessions.models import SessionKind

    return SessionKind.objects.create(
        name="Desktop",
        type=SessionKind.Type.PORT,
        command=[sys.executable, "-m", "klique.worker.desktop", "--port", "{port}"],
        ready_path="/vnc.html",
        strip_base_url=True,
        open_path="vnc.html?autoconnect=1&resize=remote&path={base_path}websockify",
    )
