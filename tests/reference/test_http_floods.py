"""Floods before authentication: idle or slow connections that never show the bearer token.

Real ``engram-reference serve --http`` processes on 127.0.0.1. The flood's connections come from other
loopback addresses (127.0.0.2 and up), as an attacker's would come from other hosts, and are re-opened
whenever the server closes them; the host's client connects from 127.0.0.1 and must be served throughout.
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any

import httpx2
import pytest

from tests.reference.conftest import HttpServer, http_server
from tests.reference.test_edge_http import INITIALIZE, assert_served, headers, seconds_until_closed
from tests.reference.test_edge_stdio import set_transport

FLOOD = 100  # connections, the default http_max_connections: they used to fill it
CALLS = 50
FLOOD_SECONDS = 60.0  # the flood stops by itself after this, whatever the test does


class Flood:
    """``count`` idle connections from ``sources`` loopback addresses, each re-opened once the server closes it."""

    def __init__(self, server: HttpServer, count: int, sources: int) -> None:
        self.server, self.count = server, count
        # The first half from the first source, the rest spread over the others.
        self.sources = [f"127.0.0.{2 + (0 if i < count // 2 else 1 + i % (sources - 1))}" for i in range(count)]
        self.opened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        deadline = time.monotonic() + 10
        while self.opened < self.count:  # every connection open once before the test goes on
            assert time.monotonic() < deadline, "the flood could not open its connections"
            time.sleep(0.01)
        time.sleep(0.2)  # and accepted by the server
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(10)

    def _open(self, source: str) -> socket.socket | None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.server.port), timeout=1, source_address=(source, 0))
        except OSError:
            return None
        sock.setblocking(False)
        self.opened += 1
        return sock

    def _run(self) -> None:
        held: list[socket.socket | None] = [self._open(source) for source in self.sources]
        ends = time.monotonic() + FLOOD_SECONDS
        while not self._stop.wait(0.02) and time.monotonic() < ends:
            for i, sock in enumerate(held):
                if sock is None or _closed(sock):
                    if sock is not None:
                        sock.close()
                    held[i] = self._open(self.sources[i])
        for sock in held:
            if sock is not None:
                sock.close()


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def served(server: HttpServer) -> int:
    """How many of CALLS initialize requests, each on a new connection, were answered 200."""
    answered = 0
    for _ in range(CALLS):
        try:
            status = httpx2.post(server.url, headers=headers(server), json=INITIALIZE, timeout=5).status_code
        except httpx2.TransportError:
            continue
        answered += status == 200
    return answered


def test_an_idle_flood_re_opened_as_it_is_closed_never_locks_the_host_out(
    make_reference_dir: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Half the flood from one source (past its own bound), half from fifty others (past the total)."""
    ref = make_reference_dir()  # the transport limits init writes
    with http_server(ref) as running, Flood(running, FLOOD, 51) as flood:
        answered = served(running)
        with capsys.disabled():
            print(f"\n{FLOOD} idle connections from 51 sources, re-opened as closed "
                  f"({flood.opened} opened): the host served {answered} of {CALLS} calls")
        assert answered == CALLS, f"the host was locked out by {flood.count} idle connections"


def test_a_connection_that_sends_nothing_is_closed_at_the_first_byte_deadline(
    make_reference_dir: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = set_transport(make_reference_dir(), http_first_byte_timeout_seconds=1, http_header_timeout_seconds=10)
    with http_server(ref) as running:
        started = time.monotonic()
        silent = socket.create_connection(("127.0.0.1", running.port), timeout=10)
        seconds = seconds_until_closed(silent, started)
        silent.close()
        assert seconds is not None and seconds < 5, f"a silent connection was held {seconds} s"
        with capsys.disabled():
            print(f"\na silent connection: closed {seconds:.2f} s after opening (first-byte timeout 1 s, "
                  "header timeout 10 s)")
        assert_served(running)
