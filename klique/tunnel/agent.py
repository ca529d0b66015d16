"""The daemon's end of its session tunnel: one WebSocket out to the session gateway, kept open
(reconnected with back-off), over which the gateway's streams reach this worker's session
servers on the worker's own loopback. No inbound port (docs/sessions.md).

The agent runs its own asyncio loop in a thread. The daemon tells it, each tick, which sessions
run here and where (``routes``); a stream for any other session is refused with 404, and a path
outside the session's base URL with 400. It adds the session's own credential (Jupyter's token)
on the worker's side, so the browser never needs it, and counts the bytes each session moves
through the tunnel (``moved``): the session's network activity for the idle limits.
"""

import asyncio
import contextlib
import logging
import ssl
import threading
from collections import defaultdict
from collections.abc import Callable

import aiohttp
from multidict import CIMultiDict

from klique.tunnel import protocol as p
from klique.tunnel.routes import Route

log = logging.getLogger("klique.worker")

BACKOFF_MAX_S = 30.0
MAX_MESSAGE = 64 * 1024 * 1024
QUEUE_FRAMES = 256  # a stream's frames waiting for its session; more hold the tunnel's reading back


class Agent:
    def __init__(self, url: str, token: Callable[[], str], *, verify: ssl.SSLContext | bool = True):
        self.url, self.token, self.verify = url, token, verify
        self.routes: dict[int, Route] = {}  # replaced whole by the daemon (one reference swap)
        self.moved: defaultdict[int, int] = defaultdict(int)  # bytes each session moved, both ways
        self.connected = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.stopping: asyncio.Event | None = None
        self.ws = None

    # The daemon's side (its own thread).

    def start(self) -> None:
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), name="klique-tunnel", daemon=True)
        self.thread.start()
        ready.wait(5)

    def stop(self, timeout: float = 5.0) -> None:
        if self.loop is not None and self.stopping is not None:
            self.loop.call_soon_threadsafe(self.stopping.set)
            with contextlib.suppress(RuntimeError):
                asyncio.run_coroutine_threadsafe(self._close(), self.loop)
        if self.thread is not None:
            self.thread.join(timeout)

    def reconnect(self) -> None:
        """Open the tunnel again (with the daemon's new token, after it enrolled again)."""
        if self.loop is not None:
            with contextlib.suppress(RuntimeError):
                asyncio.run_coroutine_threadsafe(self._close(), self.loop)

    # The loop.

    def _run(self, ready: threading.Event) -> None:
        self.loop = asyncio.new_event_loop()
        self.stopping = asyncio.Event()
        ready.set()
        try:
            self.loop.run_until_complete(self._main())
        finally:
            self.loop.close()

    async def _close(self) -> None:
        if self.ws is not None:
            await self.ws.close()

    async def _main(self) -> None:
        # No keep-alive toward the sessions: an idle pooled connection would count as a client.
        connector = aiohttp.TCPConnector(force_close=True, ssl=self.verify)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as http:
            backoff = 1.0
            while not self.stopping.is_set():
                try:
                    async with http.ws_connect(
                        self.url,
                        headers={"Authorization": f"Bearer {self.token()}"},
                        heartbeat=30,
                        max_msg_size=MAX_MESSAGE + p.HEAD.size,
                    ) as ws:
                        self.ws, backoff = ws, 1.0
                        self.connected.set()
                        log.info("tunnel open", extra={"fields": {"gateway": self.url}})
                        await self._serve(ws, http)
                        log.info("tunnel closed", extra={"fields": {"gateway": self.url}})
                except (aiohttp.ClientError, OSError, TimeoutError) as error:
                    log.warning(
                        "cannot open the tunnel", extra={"fields": {"gateway": self.url, "error": str(error)}}
                    )
                finally:
                    self.ws = None
                    self.connected.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _serve(self, ws, http: aiohttp.ClientSession) -> None:
        queues: dict[int, asyncio.Queue] = {}
        tasks: dict[int, asyncio.Task] = {}
        sending = asyncio.Lock()

        async def send(stream: int, kind: int, payload=b"") -> None:
            async with sending:
                await ws.send_bytes(p.encode(stream, kind, payload))

        def done(stream: int, task: asyncio.Task) -> None:
            queues.pop(stream, None)
            tasks.pop(stream, None)

        try:
            async for message in ws:
                if message.type != aiohttp.WSMsgType.BINARY:
                    continue
                try:
                    frame = p.decode(message.data)
                    if frame.type in (p.HTTP, p.WS):
                        head = frame.json()
                        queues[frame.stream] = queue = asyncio.Queue(QUEUE_FRAMES)
                        serve = self._http if frame.type == p.HTTP else self._websocket
                        task = asyncio.create_task(self._stream(serve, http, send, frame.stream, head, queue))
                        tasks[frame.stream] = task
                        task.add_done_callback(lambda t, s=frame.stream: done(s, t))
                    elif frame.stream in queues:
                        if frame.type == p.RESET:
                            tasks[frame.stream].cancel()
                        else:
                            await queues[frame.stream].put(frame)
                except p.FrameError as error:
                    log.warning("bad frame from the gateway", extra={"fields": {"error": str(error)}})
        finally:
            for task in list(tasks.values()):
                task.cancel()

    def _counter(self, session):
        def count(size: int) -> None:
            self.moved[session] += size

        return count

    def _route(self, head: dict) -> tuple[Route, str] | tuple[None, dict]:
        route = self.routes.get(head.get("session"))
        if route is None:
            return None, {"status": 404, "error": "That session does not run on this worker."}
        path = route.path(str(head.get("path") or ""))
        if path is None:
            return None, {"status": 400, "error": "That path is not under the session's base URL."}
        return route, path

    async def _stream(self, serve, http, send, stream: int, head: dict, queue: asyncio.Queue) -> None:
        """Serve one stream the gateway opened, when it is for a session of this worker."""
        route, path = self._route(head)
        if route is None:
            await send(stream, p.RESET, path)
            return
        await serve(http, send, stream, head, queue, route, path)

    async def _http(self, http, send, stream: int, head: dict, queue: asyncio.Queue, route: Route, path: str):
        session = head.get("session")
        first = await queue.get()
        body = None if first.type == p.END else _body(first, queue, self._counter(session))
        try:
            async with http.request(
                str(head.get("method") or "GET"),
                route.local + path,
                headers=CIMultiDict(route.headers(head.get("headers") or [])),
                data=body,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            ) as answer:
                await send(
                    stream, p.RESPONSE, {"status": answer.status, "headers": p.forwarded(answer.headers)}
                )
                async for chunk in answer.content.iter_any():
                    self.moved[session] += len(chunk)
                    for piece in p.chunks(chunk):
                        await send(stream, p.DATA, piece)
                await send(stream, p.END)
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            await send(stream, p.RESET, _unreachable(error))

    async def _websocket(
        self, http, send, stream: int, head: dict, queue: asyncio.Queue, route: Route, path: str
    ) -> None:
        session = head.get("session")
        url = "ws" + route.local.removeprefix("http") + path
        try:
            upstream = await http.ws_connect(
                url,
                headers=CIMultiDict(route.headers(head.get("headers") or [])),
                protocols=tuple(head.get("protocols") or ()),
                origin=route.local,
                max_msg_size=MAX_MESSAGE,
            )
        except aiohttp.WSServerHandshakeError as error:
            await send(stream, p.RESET, {"status": error.status or 502, "error": error.message})
            return
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            await send(stream, p.RESET, _unreachable(error))
            return
        async with upstream:
            await send(stream, p.ACCEPTED, {"protocol": upstream.protocol})
            await _relay(upstream, send, stream, queue, self._counter(session))


def _unreachable(error: Exception) -> dict:
    return {"status": 502, "error": f"The session's server did not answer: {error}"}


async def _body(first: p.Frame, queue: asyncio.Queue, count):
    """A request's body as the gateway sends it, DATA frame by DATA frame until END."""
    frame = first
    while frame.type == p.DATA:
        count(len(frame.payload))
        yield frame.payload
        frame = await queue.get()


async def _relay(upstream, send, stream: int, queue: asyncio.Queue, count) -> None:
    async def down():
        async for message in upstream:
            if message.type == aiohttp.WSMsgType.TEXT:
                count(len(message.data))
                await send(stream, p.TEXT, message.data)
            elif message.type == aiohttp.WSMsgType.BINARY:
                count(len(message.data))
                await send(stream, p.BINARY, message.data)
        await send(stream, p.CLOSE, {"code": upstream.close_code or 1000})

    async def up():
        while True:
            frame = await queue.get()
            if frame.type == p.TEXT:
                count(len(frame.payload))
                await upstream.send_str(frame.payload.decode())
            elif frame.type == p.BINARY:
                count(len(frame.payload))
                await upstream.send_bytes(frame.payload)
            elif frame.type == p.CLOSE:
                code = frame.json().get("code", 1000)
                await upstream.close(code=code if isinstance(code, int) and 1000 <= code < 5000 else 1000)
                return

    tasks = {asyncio.create_task(down()), asyncio.create_task(up())}
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await task
