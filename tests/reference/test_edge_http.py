"""The HTTP edge: deadlines on headers and bodies, a connection cap, and JSON-RPC answers consistent with stdio.

Real ``engram-reference serve --http`` processes on 127.0.0.1, driven with raw
sockets where the test must behave as a slow or stuck client. Each test ends
by seeing an ordinary client served by the same process.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.reference.conftest import (
    ERAS,
    HttpServer,
    http_client_for,
    http_server,
    search_args,
)
from tests.reference.test_edge_stdio import DEFAULT_MAX_MESSAGE_BYTES, INVALID_REQUEST, PARSE_ERROR, set_transport

pytestmark = pytest.mark.anyio

HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0
WAIT_FOR_CLOSE = 20.0  # how long a test waits to see a connection closed before calling it held open
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "edge", "version": "1"}},
}


@pytest.fixture(scope="module")
def server(make_reference_dir: Any) -> Iterator[HttpServer]:
    ref = set_transport(make_reference_dir(), http_header_timeout_seconds=HEADER_TIMEOUT,
                         http_body_timeout_seconds=BODY_TIMEOUT, http_max_connections=64)
    with http_server(ref) as running:
        yield running


def headers(server: HttpServer, era: str = "legacy") -> dict[str, str]:
    return {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
            "Authorization": f"Bearer {server.bearer}",
            "MCP-Protocol-Version": "2025-11-25" if era == "legacy" else "2026-07-28"}


def assert_served(server: HttpServer) -> None:
    response = httpx2.post(server.url, headers=headers(server), json=INITIALIZE, timeout=10)
    assert response.status_code == 200, response.text
    assert "serverInfo" in response.text


def connect(server: HttpServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def seconds_until_closed(sock: socket.socket, started: float) -> float | None:
    """Read until the server closes; the seconds it took from ``started``, or None if it held on."""
    sock.settimeout(0.2)
    deadline = started + WAIT_FOR_CLOSE
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - started
        if not data:
            return time.monotonic() - started
        assert b" 200 " not in data.split(b"\r\n", 1)[0], "a stalled request was served"
    return None


def report(capsys: pytest.CaptureFixture[str], text: str) -> None:
    with capsys.disabled():
        print(f"\n{text}")


# -- deadlines ---------------------------------------------------------------------------


def test_slow_header_connections_are_closed_and_others_still_served(
    server: HttpServer, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    silent = [connect(server) for _ in range(10)]
    trickling = [connect(server) for _ in range(10)]
    partial = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode()
    for sock in trickling:
        sock.sendall(partial)
    assert_served(server)  # while twenty connections stall
    for _ in range(3):  # a byte at a time does not buy more time
        time.sleep(HEADER_TIMEOUT / 3)
        for sock in trickling:
            with contextlib.suppress(OSError):
                sock.sendall(b"X")
    closed = [seconds_until_closed(sock, started) for sock in silent + trickling]
    for sock in silent + trickling:
        sock.close()
    assert all(seconds is not None for seconds in closed), f"{closed.count(None)} of 20 connections held open"
    last = max(seconds for seconds in closed if seconds is not None)
    report(capsys, f"20 slow-header connections: all closed, the last {last:.2f} s after opening "
                   f"(header timeout {HEADER_TIMEOUT} s)")
    assert_served(server)


def test_a_kept_alive_connection_stalling_on_its_next_headers_is_closed(server: HttpServer) -> None:
    sock = connect(server)
    body = json.dumps(INITIALIZE).encode()
    request = [f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode()]
    request += [f"{k}: {v}\r\n".encode() for k, v in headers(server).items()]
    request += [f"Content-Length: {len(body)}\r\n\r\n".encode(), body]
    sock.sendall(b"".join(request))
    first = sock.recv(65536)
    assert first.startswith(b"HTTP/1.1 200"), first[:100]
    sock.sendall(b"POST /mcp HTTP/1.1\r\n")  # the next request's first line, then nothing
    assert seconds_until_closed(sock, time.monotonic()) is not None, "held open"
    sock.close()
    assert_served(server)


def test_a_slow_body_is_closed(server: HttpServer, capsys: pytest.CaptureFixture[str]) -> None:
    sock = connect(server)
    head = [f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode()]
    head += [f"{k}: {v}\r\n".encode() for k, v in headers(server).items()]
    head += [b"Content-Length: 1000\r\n\r\n", b'{"jsonrpc":"2.0",']
    started = time.monotonic()
    sock.sendall(b"".join(head))
    seconds = seconds_until_closed(sock, started)
    sock.close()
    assert seconds is not None, "a connection with an unfinished body was held open"
    report(capsys, f"slow body: closed {seconds:.2f} s after the headers (body timeout {BODY_TIMEOUT} s)")
    assert_served(server)


def held_request(server: HttpServer) -> socket.socket:
    """A connection that sent an authenticated request's headers and holds on to its body."""
    sock = connect(server)
    head = [f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode()]
    head += [f"{k}: {v}\r\n".encode() for k, v in headers(server).items()]
    sock.sendall(b"".join([*head, b"Content-Length: 1000\r\n\r\n"]))
    return sock


def test_the_connection_cap_answers_503_and_frees_up(make_reference_dir: Any) -> None:
    """The cap counts authenticated connections, beside the unauthenticated budget (tests/reference/
    test_http_floods.py): with both full, a new request is answered 503 until connections close."""
    cap, budget = 4, 2
    ref = set_transport(make_reference_dir(), http_header_timeout_seconds=3, http_body_timeout_seconds=3,
                        http_max_connections=cap, http_unauthenticated_connections=budget,
                        http_unauthenticated_per_source=budget)
    with http_server(ref) as running:
        started = time.monotonic()
        held = []
        for _ in range(cap):
            held.append(held_request(running))
            time.sleep(0.1)  # its headers are read (it is proven) before the next one opens
        held += [connect(running) for _ in range(budget)]
        time.sleep(0.2)  # let the server accept them
        refused = httpx2.post(running.url, headers=headers(running), json=INITIALIZE, timeout=10)
        assert refused.status_code == 503
        assert all(seconds_until_closed(sock, started) is not None for sock in held)
        for sock in held:
            sock.close()
        assert_served(running)


# -- JSON-RPC answers, as over stdio -----------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(("body", "status", "code", "request_id"), [
    (b"[" * 1000, 400, PARSE_ERROR, None),
    (b"{", 400, PARSE_ERROR, None),
    (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', 400, INVALID_REQUEST, None),
    (b'{"jsonrpc":"2.0","id":{},"method":"ping"}', 400, INVALID_REQUEST, None),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', 400, INVALID_REQUEST, None),
    (b'{"jsonrpc":"2.0","id":1e400,"method":"ping"}', 400, INVALID_REQUEST, None),
    (b'{"jsonrpc":"1.0","id":7,"method":"ping"}', 400, INVALID_REQUEST, 7),
    (b'{"jsonrpc":"2.0","id":7,"method":"ping","params":[1]}', 400, INVALID_REQUEST, 7),
    (b"[]", 400, INVALID_REQUEST, None),
    (b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"q":"\\ud800"}}', 400, PARSE_ERROR, 9),
    (b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"q":"\xff"}}', 400, PARSE_ERROR, 9),
], ids=["deep", "truncated", "id-null", "id-object", "id-float", "id-1e400", "version-1.0", "array-params", "batch",
        "lone-surrogate", "invalid-utf8"])
def test_a_bad_body_gets_the_same_answer_as_over_stdio(
    server: HttpServer, era: str, body: bytes, status: int, code: int, request_id: Any
) -> None:
    response = httpx2.post(server.url, headers=headers(server, era), content=body, timeout=10)
    assert response.status_code == status
    reply = response.json()
    assert reply == {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": reply["error"]["message"]}}
    assert reply["error"]["message"] in ("Parse error", "Invalid request"), "constant messages, nothing from the input"
    assert_served(server)


@pytest.mark.parametrize("era", ERAS)
def test_a_malformed_notification_is_acknowledged_and_not_answered(server: HttpServer, era: str) -> None:
    body = b'{"jsonrpc":"2.0","method":"notifications/initialized","params":[1]}'
    response = httpx2.post(server.url, headers=headers(server, era), content=body, timeout=10)
    assert (response.status_code, response.content) == (202, b"")
    assert_served(server)


def test_a_body_over_the_cap_is_refused(server: HttpServer) -> None:
    pad = b"x" * DEFAULT_MAX_MESSAGE_BYTES
    response = httpx2.post(server.url, headers=headers(server), timeout=30,
                           content=b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + pad + b'"}}')
    assert response.status_code == 413
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": INVALID_REQUEST, "message": "Message too large"},
    }
    assert_served(server)


@pytest.mark.parametrize("era", ERAS)
async def test_a_full_session_is_served_after_the_probes(server: HttpServer, era: str) -> None:
    async with http_client_for(server, era) as client:
        assert (await client.call("engram_memory_search", search_args("anything"))).ok
