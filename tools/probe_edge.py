"""Re-run the edge probes on a fresh reference server with the default settings, and print what happened.

    python tools/probe_edge.py [--line-mb 100] [--slow 50]

A probe, not a test: it prints figures and asserts nothing. Over stdio: the
deeply nested line, the odd ids, the largest line accepted, and the peak RSS
of the server while it is sent one very long line. Over HTTP: slow-header
connections, how long each stays open, whether an ordinary client is served
meanwhile, and the peak RSS while a very long body is posted.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2

from engram_mcp.reference._config import load_config
from engram_mcp.reference._init import write_configuration

_READ_CHUNK = 1 << 16  # bytes per read from the server under probe
ENGRAM = [sys.executable, "-m", "engram_mcp.reference._cli"]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
}


class Stdio:
    def __init__(self, config: Path) -> None:
        self.process = subprocess.Popen([*ENGRAM, "serve", "--config", str(config)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.buffer = b""

    def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def read(self, timeout: float = 30.0) -> Any:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            if self.process.poll() is not None:
                return f"the server exited with {self.process.returncode}"
            ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return "no answer"
            chunk = os.read(self.process.stdout.fileno(), _READ_CHUNK)
            if not chunk:
                return f"stdout closed (exit code {self.process.poll()})"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def exchange(self, line: bytes) -> Any:
        self.write(line + b"\n")
        return self.read()

    def alive(self) -> bool:
        reply = self.exchange(b'{"jsonrpc":"2.0","id":"alive","method":"ping"}')
        return isinstance(reply, dict) and reply.get("id") == "alive" and "result" in reply

    def peak_rss_mib(self) -> float:
        return peak_rss_mib(self.process.pid)

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(10)


def short(reply: Any) -> str:
    if isinstance(reply, dict) and "error" in reply:
        return f"error {reply['error']['code']} {reply['error']['message']!r}, id {json.dumps(reply['id'])}"
    return json.dumps(reply)[:100] if isinstance(reply, dict) else str(reply)


def probe_stdio(config: Path, line_mb: int) -> None:
    cap = load_config(config).transport.max_message_bytes
    server = Stdio(config)
    try:
        server.exchange(json.dumps(INITIALIZE).encode())
        server.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        print(f"stdio (peak RSS after initialize: {server.peak_rss_mib():.1f} MiB)")
        print(f"  '[' x 1000: {short(server.exchange(b'[' * 1000))}; alive afterwards: {server.alive()}")
        for raw in (b"null", b"{}", b"1.5", b"1e400", b"true"):
            reply = server.exchange(b'{"jsonrpc":"2.0","id":' + raw + b',"method":"ping"}')
            print(f"  id {raw.decode()}: {short(reply)}")
        for label, line in (("jsonrpc 1.0", b'{"jsonrpc":"1.0","id":7,"method":"ping"}'),
                            ("array params", b'{"jsonrpc":"2.0","id":7,"method":"ping","params":[1]}'),
                            ("lone surrogate", b'{"jsonrpc":"2.0","id":8,"method":"ping","params":{"q":"\\ud800"}}')):
            print(f"  {label}: {short(server.exchange(line))}")
        head, tail = b'{"jsonrpc":"2.0","id":"at-cap","method":"ping","params":{"pad":"', b'"}}'
        fill = cap - len(head) - len(tail)
        accepted = server.exchange(head + b"x" * fill + tail)
        refused = server.exchange(head + b"x" * (fill + 1) + tail)
        print(f"  cap {cap} bytes: a line of {cap} bytes -> {short(accepted)}; of {cap + 1} -> {short(refused)}")
        before = server.peak_rss_mib()
        started = time.monotonic()
        server.write(head)
        block = b"z" * (1 << 20)
        for _ in range(line_mb):
            server.write(block)
        server.write(tail + b"\n")
        reply = server.read()
        print(f"  a {line_mb} MiB line: {short(reply)} in {time.monotonic() - started:.2f} s; "
              f"peak RSS {before:.1f} MiB before, {server.peak_rss_mib():.1f} MiB after; alive: {server.alive()}")
    finally:
        server.close()


def peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(x for x in status.splitlines() if x.startswith("VmHWM:")).split()[1]) / 1024


def probe_http(config: Path, slow: int, line_mb: int) -> None:
    transport = load_config(config).transport
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]
    process = subprocess.Popen([*ENGRAM, "serve", "--config", str(config), "--http", f"127.0.0.1:{port}"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    bearer = (config.parent / "keys" / "http-bearer.txt").read_text().strip()
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {bearer}"}
    try:
        for _ in range(300):
            try:
                httpx2.post(url, json={}, timeout=1)
                break
            except httpx2.TransportError:
                time.sleep(0.1)
        print(f"http (header timeout {transport.http_header_timeout_seconds} s, "
              f"connection cap {transport.http_max_connections})")
        started = time.monotonic()
        sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(slow)]
        for sock in sockets:
            sock.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
            sock.setblocking(False)
        served = httpx2.post(url, json=INITIALIZE, headers=headers, timeout=10).status_code
        print(f"  {slow} slow-header connections open; an ordinary client meanwhile: HTTP {served}")
        closed: dict[int, float] = {}
        while len(closed) < slow and time.monotonic() - started < 120:
            ready, _, _ = select.select([s for i, s in enumerate(sockets) if i not in closed], [], [], 0.5)
            for sock in ready:
                try:
                    data = sock.recv(_READ_CHUNK)
                except ConnectionResetError:
                    data = b""
                if not data:
                    closed[sockets.index(sock)] = time.monotonic() - started
        times = sorted(closed.values())
        print(f"  closed by the server: {len(closed)} of {slow}"
              + (f", after {times[0]:.2f} to {times[-1]:.2f} s" if times else ""))
        for sock in sockets:
            sock.close()
        print(
            "  an ordinary client afterwards: HTTP "
            f"{httpx2.post(url, json=INITIALIZE, headers=headers, timeout=10).status_code}"
        )
        before = peak_rss_mib(process.pid)

        def body() -> Any:
            yield b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"'
            for _ in range(line_mb):
                yield b"z" * (1 << 20)
            yield b'"}}'

        try:
            status: Any = httpx2.post(url, content=body(), headers=headers, timeout=60).status_code
        except httpx2.TransportError as error:  # the server may answer and close before the body is all sent
            status = type(error).__name__
        print(f"  a {line_mb} MiB chunked body: HTTP {status}; peak RSS {before:.1f} MiB before, "
              f"{peak_rss_mib(process.pid):.1f} MiB after")
    finally:
        process.terminate()
        process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--line-mb", type=int, default=100)
    parser.add_argument("--slow", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        write_configuration(Path(folder), seed="probe")
        config = Path(folder) / "server.toml"
        probe_stdio(config, args.line_mb)
        probe_http(config, args.slow, args.line_mb)


if __name__ == "__main__":
    main()
