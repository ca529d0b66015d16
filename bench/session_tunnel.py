"""What the session tunnel costs (docs/benchmarks.md, "Session tunnel"): the same requests to a
session's server straight and through ``klique-gateway`` and a daemon's tunnel agent, side by side
in one process tree on this machine.

The gateway and the agent are Klique's own (klique/tunnel); the session server is a real
``python -m http.server``; the control plane's two answers (who the worker is, who may open the
session) come from a small aiohttp app here, so the figures are the tunnel's alone (the
integration with the real control plane is tested in tests/sessions/test_gateway.py).

    .venv/bin/python bench/session_tunnel.py              # 300 small requests, 20 MiB download
    .venv/bin/python bench/session_tunnel.py --smoke      # CI: a few of each, checks the bytes
"""

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from klique.tunnel.agent import Agent  # noqa: E402
from klique.tunnel.gateway import Gateway  # noqa: E402
from klique.tunnel.routes import Route  # noqa: E402

SESSION = 7


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(app: web.Application, port: int) -> None:
    """Run an aiohttp app on its own thread and loop."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        ready.set()
        loop.run_forever()

    threading.Thread(target=run, daemon=True).start()
    ready.wait(10)


def control_plane() -> web.Application:
    async def worker(request):
        return web.json_response({"worker": 1})

    async def access(request):
        return web.json_response({"session": SESSION, "worker": 1, "kind": "port"})

    app = web.Application()
    app.router.add_get("/api/v1/workers/tunnel", worker)
    app.router.add_get(r"/api/v1/sessions/{id}/access/", access)
    return app


def timed(client: httpx.Client, url: str, n: int) -> list[float]:
    took = []
    for _ in range(n):
        began = time.perf_counter()
        answer = client.get(url)
        took.append(time.perf_counter() - began)
        assert answer.status_code == 200, answer.status_code
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--mib", type=int, default=20)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.requests, args.mib = 10, 2
    folder = Path(tempfile.mkdtemp(prefix="klique-tunnel-bench-"))
    base = folder / "sessions" / str(SESSION)
    base.mkdir(parents=True)
    (base / "small.txt").write_text("x" * 1024)
    (base / "big.bin").write_bytes(os.urandom(args.mib * 1024 * 1024))
    session_port, plane_port, gateway_port = free_port(), free_port(), free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(session_port), "--bind", "127.0.0.1"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        serve(control_plane(), plane_port)
        gateway = Gateway(f"http://127.0.0.1:{plane_port}", public_url=f"http://127.0.0.1:{gateway_port}")
        serve(gateway.app(), gateway_port)
        agent = Agent(f"ws://127.0.0.1:{gateway_port}/tunnel/", lambda: "kqw_bench")
        agent.routes = {SESSION: Route(f"http://127.0.0.1:{session_port}", f"/sessions/{SESSION}/")}
        agent.start()
        assert agent.connected.wait(10), "the tunnel did not open"
        path = f"/sessions/{SESSION}/"
        direct = f"http://127.0.0.1:{session_port}{path}"
        tunnelled = f"http://127.0.0.1:{gateway_port}{path}"
        for _ in range(50):
            try:
                httpx.get(direct + "small.txt", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        with httpx.Client(timeout=60, headers={"Cookie": "sessionid=bench"}) as client:
            timed(client, direct + "small.txt", 3)
            timed(client, tunnelled + "small.txt", 3)
            rows = {}
            for name, url in (("straight", direct), ("through the tunnel", tunnelled)):
                small = timed(client, url + "small.txt", args.requests)
                began = time.perf_counter()
                body = client.get(url + "big.bin").content
                big = time.perf_counter() - began
                assert body == (base / "big.bin").read_bytes()
                rows[name] = (statistics.median(small), sorted(small)[int(0.99 * (len(small) - 1))], big)
        agent.stop()
    finally:
        server.terminate()
        server.wait(10)
    load = os.getloadavg()[0]
    print(f"{args.requests} GETs of 1 KiB and one of {args.mib} MiB, load {load:.1f}")
    print(f"{'path':<20} {'median ms':>10} {'p99 ms':>8} {'MiB/s':>8}")
    for name, (median, p99, big) in rows.items():
        print(f"{name:<20} {median * 1000:>10.2f} {p99 * 1000:>8.2f} {args.mib / big:>8.1f}")
    ratio = rows["through the tunnel"][0] / rows["straight"][0]
    print(f"tunnel / straight, median small GET: {ratio:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
