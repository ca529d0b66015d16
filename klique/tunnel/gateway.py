"""The session gateway (``klique-gateway``): where browsers open sessions and worker daemons keep
their tunnels, so a worker needs no inbound port (docs/sessions.md, "Through the control plane").

- ``GET /tunnel/`` (a WebSocket): a worker daemon connects out to it with its worker token, which
  the control plane checks (``GET /api/v1/workers/tunnel``); the gateway keeps one tunnel per
  worker, the newest.
- ``/sessions/<id>/...`` (any method, WebSockets included): the control plane says whether the
  browser's portal login may open session ``id`` and which worker runs it
  (``GET /api/v1/sessions/<id>/access/`` with the browser's cookies); the request then goes
  through that worker's tunnel, which alone reaches the session's server.

The gateway holds no state but its tunnels: one process serves them all (several gateways would
each need every worker's tunnel). It never sends Klique's own cookies on to a session (whose
server runs its user's code) and takes none from one.
"""

import argparse
import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from aiohttp import ClientError, ClientSession, ClientTimeout, WSMsgType, web

from klique.tunnel import protocol as p

log = logging.getLogger("klique.gateway")

ACCESS_CACHE_S = 5.0
HEAD_TIMEOUT_S = 300.0  # a session's answer may take long to begin (a big notebook saved)
MAX_MESSAGE = 64 * 1024 * 1024
QUEUE_FRAMES = 256
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
KLIQUE_COOKIES = ("sessionid", "csrftoken")


@dataclass(frozen=True)
class Access:
    status: int
    worker: int | None = None
    error: str = ""


class Tunnel:
    """A worker's tunnel: frames in, sorted to the queues of their streams."""

    def __init__(self, worker: int, ws: web.WebSocketResponse):
        self.worker, self.ws = worker, ws
        self.streams: dict[int, asyncio.Queue] = {}
        self.next_stream = 1
        self.sending = asyncio.Lock()
        self.closed = False

    def open(self) -> tuple[int, asyncio.Queue]:
        stream, self.next_stream = self.next_stream, self.next_stream + 1
        self.streams[stream] = queue = asyncio.Queue(QUEUE_FRAMES)
        return stream, queue

    async def send(self, stream: int, kind: int, payload=b"") -> None:
        if self.closed:
            raise ConnectionResetError("the worker's tunnel closed")
        async with self.sending:
            await self.ws.send_bytes(p.encode(stream, kind, payload))

    async def forget(self, stream: int, finished: bool) -> None:
        """The stream is over here; a worker still sending on it is told to stop."""
        self.streams.pop(stream, None)
        if not finished and not self.closed:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.send(stream, p.RESET, {"status": 499, "error": "the browser went away"})

    async def pump(self) -> None:
        try:
            async for message in self.ws:
                if message.type != WSMsgType.BINARY:
                    continue
                try:
                    frame = p.decode(message.data)
                except p.FrameError as error:
                    log.warning(
                        "bad frame from a worker",
                        extra={"fields": {"worker": self.worker, "error": str(error)}},
                    )
                    continue
                queue = self.streams.get(frame.stream)
                if queue is not None:
                    await queue.put(frame)
        finally:
            self.closed = True
            for queue in self.streams.values():
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait(None)


class Gateway:
    def __init__(
        self, control_plane: str, *, public_url: str = "", portal_url: str = "", cookies=KLIQUE_COOKIES
    ):
        self.control_plane = control_plane.rstrip("/")
        self.public_url = public_url.rstrip("/")
        # Where people log in (the portal); the gateway's own URL when they share an origin.
        self.portal_url = (portal_url or public_url).rstrip("/")
        self.cookies = frozenset(cookies)
        self.tunnels: dict[int, Tunnel] = {}
        self.cache: dict[tuple[int, str], tuple[float, Access]] = {}
        self.http: ClientSession | None = None

    # The control plane's word.

    async def worker_of(self, authorization: str) -> int | None:
        async with self.http.get(
            f"{self.control_plane}/api/v1/workers/tunnel", headers={"Authorization": authorization}
        ) as answer:
            if answer.status != 200:
                return None
            return (await answer.json()).get("worker")

    async def access(self, session: int, cookie: str) -> Access:
        key, now = (session, cookie), time.monotonic()
        cached = self.cache.get(key)
        if cached and cached[0] > now:
            return cached[1]
        async with self.http.get(
            f"{self.control_plane}/api/v1/sessions/{session}/access/",
            headers={"Cookie": cookie, "Accept": "application/json"},
        ) as answer:
            body = await answer.json(content_type=None) if answer.content_length != 0 else {}
            body = body if isinstance(body, dict) else {}
            access = Access(answer.status, body.get("worker"), str(body.get("detail") or ""))
        if len(self.cache) > 10_000:
            self.cache.clear()
        self.cache[key] = (now + ACCESS_CACHE_S, access)
        return access

    # Workers.

    async def tunnel(self, request: web.Request) -> web.StreamResponse:
        authorization = request.headers.get("Authorization", "")
        try:
            worker = await self.worker_of(authorization) if authorization else None
        except (ClientError, TimeoutError, ValueError) as error:
            raise web.HTTPBadGateway(text="The control plane did not answer; try again shortly.") from error
        if worker is None:
            raise web.HTTPUnauthorized(text="A worker token is needed: Authorization: Bearer kqw_...")
        ws = web.WebSocketResponse(heartbeat=30, max_msg_size=MAX_MESSAGE + p.HEAD.size)
        await ws.prepare(request)
        tunnel, old = Tunnel(worker, ws), self.tunnels.get(worker)
        self.tunnels[worker] = tunnel
        if old is not None:
            await old.ws.close()
        log.info("tunnel open", extra={"fields": {"worker": worker}})
        try:
            await tunnel.pump()
        finally:
            if self.tunnels.get(worker) is tunnel:
                del self.tunnels[worker]
            log.info("tunnel closed", extra={"fields": {"worker": worker}})
        return ws

    # Browsers.

    def origin_ok(self, request: web.Request) -> bool:
        origin = request.headers.get("Origin")
        if origin is None:
            return request.headers.get("Sec-Fetch-Site", "same-origin") in ("same-origin", "none")
        mine = self.public_url or f"{request.scheme}://{request.host}"
        return origin.rstrip("/") == mine

    def cookie(self, request: web.Request, *, klique: bool) -> str:
        """The browser's cookies: Klique's own (for the access check) or all but Klique's."""
        return "; ".join(f"{n}={v}" for n, v in request.cookies.items() if (n in self.cookies) == klique)

    async def session(self, request: web.Request) -> web.StreamResponse:
        session = int(request.match_info["id"])
        websocket = request.headers.get("Upgrade", "").lower() == "websocket"
        if (websocket or request.method in UNSAFE) and not self.origin_ok(request):
            raise web.HTTPForbidden(
                text="Open the session from the portal: this request came from another site."
            )
        try:
            access = await self.access(session, self.cookie(request, klique=True))
        except (ClientError, TimeoutError, ValueError) as error:
            log.warning("cannot ask the control plane", extra={"fields": {"error": str(error)}})
            raise web.HTTPBadGateway(text="The control plane did not answer; try again shortly.") from error
        if access.status == 401 or access.status == 403 and not request.cookies.keys() & self.cookies:
            if request.method == "GET" and not websocket:
                raise web.HTTPFound(f"{self.portal_url}/accounts/login/?next={quote(request.path_qs)}")
            raise web.HTTPUnauthorized(text="Log in to the portal first.")
        if access.status != 200:
            status = access.status if access.status in (403, 404, 409) else 502
            return web.Response(status=status, text=access.error or "You may not open this session.")
        tunnel = self.tunnels.get(access.worker)
        if tunnel is None or tunnel.closed:
            raise web.HTTPBadGateway(text="The session's worker has no tunnel open; try again shortly.")
        if websocket:
            return await self.websocket(request, tunnel, session)
        return await self.forward(request, tunnel, session)

    def head(self, request: web.Request, session: int) -> dict:
        headers = p.forwarded(request.headers, drop=frozenset({"cookie", "authorization"}))
        if other := self.cookie(request, klique=False):
            headers.append(["Cookie", other])
        return {"session": session, "method": request.method, "path": request.raw_path, "headers": headers}

    async def forward(self, request: web.Request, tunnel: Tunnel, session: int) -> web.StreamResponse:
        stream, queue = tunnel.open()
        finished = False
        try:
            await tunnel.send(stream, p.HTTP, self.head(request, session))
            async for chunk in request.content.iter_chunked(p.CHUNK):
                await tunnel.send(stream, p.DATA, chunk)
            await tunnel.send(stream, p.END)
            frame = await asyncio.wait_for(queue.get(), HEAD_TIMEOUT_S)
            if frame is None or frame.type == p.RESET:
                finished = True
                return _failed(frame)
            answer = frame.json()
            response = web.StreamResponse(status=int(answer["status"]))
            for name, value in answer.get("headers", []):
                if name.lower() == "set-cookie" and value.split("=", 1)[0].strip() in self.cookies:
                    continue
                response.headers.add(name, value)
            await response.prepare(request)
            while (frame := await queue.get()) is not None and frame.type == p.DATA:
                await response.write(frame.payload)
            if frame is None or frame.type != p.END:
                raise ConnectionResetError("the session's answer broke off")
            finished = True
            await response.write_eof()
            return response
        except TimeoutError:
            return web.Response(status=504, text="The session did not answer in time.")
        finally:
            await tunnel.forget(stream, finished)

    async def websocket(self, request: web.Request, tunnel: Tunnel, session: int) -> web.StreamResponse:
        stream, queue = tunnel.open()
        finished = False
        try:
            head = self.head(request, session)
            offered = request.headers.get("Sec-WebSocket-Protocol", "").split(",")
            head["protocols"] = [name.strip() for name in offered if name.strip()]
            await tunnel.send(stream, p.WS, head)
            frame = await asyncio.wait_for(queue.get(), 60)
            if frame is None or frame.type == p.RESET:
                finished = True
                return _failed(frame)
            protocol = frame.json().get("protocol")
            ws = web.WebSocketResponse(protocols=[protocol] if protocol else (), max_msg_size=MAX_MESSAGE)
            await ws.prepare(request)
            await _relay(ws, tunnel, stream, queue)
            finished = True
            return ws
        except TimeoutError:
            return web.Response(status=504, text="The session did not answer in time.")
        finally:
            await tunnel.forget(stream, finished)

    # The process.

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"tunnels": len(self.tunnels)})

    async def start(self, app: web.Application) -> None:
        self.http = ClientSession(timeout=ClientTimeout(total=30))

    async def stop(self, app: web.Application) -> None:
        for tunnel in list(self.tunnels.values()):
            await tunnel.ws.close()
        await self.http.close()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_MESSAGE)
        app.router.add_get("/tunnel/", self.tunnel)
        app.router.add_route("*", r"/sessions/{id:\d+}/{tail:.*}", self.session)
        app.router.add_get("/healthz", self.health)
        app.on_startup.append(self.start)
        app.on_cleanup.append(self.stop)
        return app


async def _relay(ws: web.WebSocketResponse, tunnel: Tunnel, stream: int, queue: asyncio.Queue) -> None:
    """Carry a browser's WebSocket both ways until either side closes it (and tells the other)."""

    async def upstream():
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                await tunnel.send(stream, p.TEXT, message.data)
            elif message.type == WSMsgType.BINARY:
                await tunnel.send(stream, p.BINARY, message.data)
        await tunnel.send(stream, p.CLOSE, {"code": ws.close_code or 1000})

    async def downstream():
        while (frame := await queue.get()) is not None:
            if frame.type == p.TEXT:
                await ws.send_str(frame.payload.decode())
            elif frame.type == p.BINARY:
                await ws.send_bytes(frame.payload)
            elif frame.type in (p.CLOSE, p.RESET):
                code = frame.json().get("code", 1000) if frame.type == p.CLOSE else 1011
                await ws.close(code=code if isinstance(code, int) and 1000 <= code < 5000 else 1000)
                return
        await ws.close(code=1011)

    up, down = asyncio.create_task(upstream()), asyncio.create_task(downstream())
    done, pending = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await task
    for task in done:
        with contextlib.suppress(ConnectionError):  # a side went away: the other is closed already
            task.result()


def _failed(frame: p.Frame | None) -> web.Response:
    """The browser's answer when the worker could not reach the session (or the tunnel closed)."""
    failure = frame.json() if frame is not None else {}
    status = failure.get("status", 502)
    status = status if isinstance(status, int) and 400 <= status < 600 else 502
    return web.Response(status=status, text=str(failure.get("error", "The tunnel closed.")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="klique-gateway", description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:8001", help="HOST:PORT (default 127.0.0.1:8001)")
    parser.add_argument(
        "--control-plane", required=True, help="the control plane's URL, as reached from here"
    )
    parser.add_argument(
        "--public-url",
        default="",
        help="the gateway's URL as browsers see it (the WebSocket Origin check and the login redirect)",
    )
    parser.add_argument(
        "--portal-url", default="", help="the portal's URL, where people log in (default: --public-url)"
    )
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--log-json", action="store_true", help="one JSON object per log line")
    args = parser.parse_args(argv)
    from klique.worker.cli import Formatter

    handler = logging.StreamHandler()
    handler.setFormatter(Formatter(as_json=args.log_json))
    logging.basicConfig(level=args.log_level, handlers=[handler])
    host, _, port = args.listen.rpartition(":")
    url = urlsplit(args.public_url) if args.public_url else None
    if url is not None and not url.scheme:
        parser.error("--public-url needs a scheme: https://klique.example.org")
    gateway = Gateway(args.control_plane, public_url=args.public_url, portal_url=args.portal_url)
    web.run_app(gateway.app(), host=host or "127.0.0.1", port=int(port), print=None, access_log=None)
    return 0
