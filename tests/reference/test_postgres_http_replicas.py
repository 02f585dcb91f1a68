"""Two ``serve --http`` replicas on one PostgreSQL schema, behind one endpoint, certified as one server.

A tiny test-only reverse proxy deals requests out round-robin. A request that
names an MCP session (``Mcp-Session-Id``) goes to the replica that opened it,
as a session-affine load balancer does; every other request, and every new
session, goes to the next replica, so consecutive calls of a client land on
different processes and only the shared store makes them one server. Slow
(minutes): CI runs it with ``pytest -m slow``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn

from engram_mcp.reference._init import store_toml_lines
from tests.postgres_support import postgres_url
from tests.reference.conftest import free_port, http_server, init_reference_dir
from tests.reference.test_postgres_certify import CONFORMANCE, RUN_TIMEOUT

__all__ = ["postgres_url"]  # the fixture, imported for pytest to find

SESSION = b"mcp-session-id"
HOP_BY_HOP = {b"host", b"connection", b"keep-alive", b"transfer-encoding", b"content-length"}


class RoundRobinProxy:
    """An ASGI app forwarding each HTTP request to one of ``upstreams``, streaming the answer back."""

    def __init__(self, upstreams: list[int], port: int) -> None:
        self._origin = f"http://127.0.0.1:{port}".encode()  # the proxy's own origin, as a client sends it
        self._turns = itertools.cycle(upstreams)
        self._sessions: dict[bytes, int] = {}
        self.served: dict[int, int] = dict.fromkeys(upstreams, 0)
        self._client: httpx2.AsyncClient | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        session = dict(scope["headers"]).get(SESSION)
        port = self._sessions.get(session) if session else None
        port = port if port is not None else next(self._turns)
        self.served[port] += 1
        # The replica sees itself addressed: Host, and an Origin naming this endpoint, are rewritten to it.
        headers = [(k, v.replace(self._origin, f"http://127.0.0.1:{port}".encode()) if k == b"origin" else v)
                   for k, v in scope["headers"] if k not in HOP_BY_HOP]
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if self._client is None:
            self._client = httpx2.AsyncClient(timeout=None)
        url = f"http://127.0.0.1:{port}{scope['path']}" + (f"?{scope['query_string'].decode()}"
                                                           if scope["query_string"] else "")
        request = self._client.build_request(scope["method"], url, content=body,
                                             headers=[*headers, (b"host", f"127.0.0.1:{port}".encode())])
        response = await self._client.send(request, stream=True)
        try:
            opened = response.headers.get("mcp-session-id")
            if opened:
                self._sessions[opened.encode()] = port
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP]})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


@contextmanager
def proxy(upstreams: list[int]) -> Iterator[tuple[int, RoundRobinProxy]]:
    port = free_port()
    app = RoundRobinProxy(upstreams, port)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the proxy did not start"
        time.sleep(0.05)
    try:
        yield port, app
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.mark.slow
def test_two_http_replicas_behind_one_endpoint_are_conformant_in_both_eras(postgres_url: str, tmp_path: Path) -> None:
    ref = init_reference_dir(tmp_path / "engram")
    with ref.config.open("a", encoding="utf-8") as config:
        config.write("\n" + "\n".join(store_toml_lines(postgres_url)))
    with ExitStack() as running:
        replicas = [running.enter_context(http_server(ref)) for _ in range(2)]
        port, balancer = running.enter_context(proxy([replica.port for replica in replicas]))
        run = subprocess.run(
            [*CONFORMANCE, "--target", f"http://127.0.0.1:{port}/mcp", "--profile",
             str(ref.path / "conformance-profile.toml"), "--era", "both", "--format", "json",
             "--report-dir", str(tmp_path / "report")],
            capture_output=True, text=True, timeout=RUN_TIMEOUT,
        )
    summary = json.loads(run.stdout)
    assert run.returncode == 0 and summary["conformant"], run.stderr[-4000:]
    assert summary["scored_musts"]["failed"] == 0 and summary["scored_musts"]["not_exercised"] == 0
    assert all(count > 100 for count in balancer.served.values()), balancer.served  # both replicas served
    assert not ref.store.exists()  # neither replica fell back to a SQLite file
    # No call failed inside a replica (a lost race that escaped as an error would be logged here).
    assert "Traceback" not in (ref.path / "server-http-stderr.log").read_text(encoding="utf-8")
