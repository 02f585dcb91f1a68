"""Servers under measurement, driven by the conformance harness's own client connection.

The anchor is the MCP Python SDK's low-level server with one no-op tool: what any Python MCP server pays
for the protocol alone. The reference runs as ``engram-reference serve`` over stdio, or over streamable
HTTP (``--http``) for the multi-replica measures.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engram_mcp.conformance._connect import Connection, parse_target
from engram_mcp.conformance._host import ElicitationConfirmer, SignedMetaBinding
from engram_mcp.conformance._profile import Profile, load_profile

NOOP_SERVER = '''
import anyio, mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name="noop", input_schema={"type": "object"})])

async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text="{}")], structured_content={})

server = Server("noop", on_list_tools=list_tools, on_call_tool=call_tool)

async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
'''
# The floor: the no-op tool plus what a durable call cannot avoid, one committed row in the same kind of store
# (SQLite through the store's own build, WAL and synchronous=FULL, on the same disk; or one PostgreSQL commit with
# the server's default synchronous_commit), done on a worker thread as the reference does its store work.
FLOOR_SERVER = '''
import sys, anyio, mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

backend, where = sys.argv[1], sys.argv[2]
if backend == "sqlite":
    from engram_mcp.reference._sqlite import sqlite3
    db = sqlite3.connect(where, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")

    def commit_one_row():
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO floor (body) VALUES (?)", ("x" * 200,))
        db.execute("COMMIT")
else:
    import psycopg
    db = psycopg.connect(where, autocommit=True)
    db.execute("CREATE TABLE IF NOT EXISTS floor (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)")

    def commit_one_row():
        db.execute("INSERT INTO floor (body) VALUES (%s)", ("x" * 200,))

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name="noop", input_schema={"type": "object"})])

async def call_tool(ctx, params):
    await anyio.to_thread.run_sync(commit_one_row)
    return types.CallToolResult(content=[types.TextContent(type="text", text="{}")], structured_content={})

server = Server("floor", on_list_tools=list_tools, on_call_tool=call_tool)

async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
'''
META_REUSE = 200  # calls per signed binding before a fresh one is signed
META_MAX_AGE = 20.0  # seconds: well inside the binding's lifetime (60 s), however slow the calls are


def noop_connection(scratch: Path) -> Connection:
    script = scratch / "noop_server.py"
    script.write_text(NOOP_SERVER, encoding="utf-8")
    return opened(f"stdio:{sys.executable} {script}")


def floor_connection(scratch: Path, backend: str, where: str) -> Connection:
    """The floor server for ``backend``: ``where`` is the SQLite file, or the PostgreSQL URL (its search_path set)."""
    script = scratch / "floor_server.py"
    script.write_text(FLOOR_SERVER, encoding="utf-8")
    return opened("stdio:" + shlex.join([sys.executable, str(script), backend, where]))


def opened(target: str, headers: dict[str, str] | None = None) -> Connection:
    conn = Connection(parse_target(target, headers=headers), "legacy", ElicitationConfirmer())
    conn.open()
    return conn


def reference_stdio(directory: Path) -> Connection:
    return opened(f"stdio:{sys.executable} -m engram_mcp.reference serve --config {directory / 'server.toml'}")


class Host:
    """Signs the host binding for the primary scope of a configuration's profile."""

    def __init__(self, directory: Path) -> None:
        self.profile: Profile = load_profile(directory / "conformance-profile.toml")
        self.binding = SignedMetaBinding.from_profile(self.profile)
        scope = self.profile.scope_for()
        assert scope is not None, "the generated profile has a primary scope"
        self.scope = scope
        principal = scope.principal_with(set(scope.principals["agent-full"]))
        assert principal is not None
        self.principal = principal
        self.purpose = self.profile.purpose_ref
        self._meta: dict[str, Any] | None = None
        self._uses = 0
        self._signed_at = 0.0
        self.headers = dict(self.profile.http_headers)  # the bearer token, for HTTP replicas

    def meta(self) -> dict[str, Any]:
        if self._meta is None or self._uses >= META_REUSE or time.monotonic() - self._signed_at > META_MAX_AGE:
            self._meta, self._uses = self.binding.meta(self.scope, self.principal), 0
            self._signed_at = time.monotonic()
        self._uses += 1
        return self._meta


def call_value(conn: Connection, tool: str, arguments: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    reply = conn.call(tool, arguments, meta)
    if reply.value is None:
        raise RuntimeError(f"{tool} answered {reply.code!r}")
    return reply.value


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_replicas(directory: Path, count: int) -> Iterator[list[str]]:
    """``count`` processes of ``engram-reference serve --http`` on one configuration: their MCP URLs."""
    processes: list[subprocess.Popen[bytes]] = []
    urls = []
    try:
        for _ in range(count):
            port = free_port()
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "engram_mcp.reference", "serve", "--config", str(directory / "server.toml"),
                 "--http", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            urls.append(f"http://127.0.0.1:{port}/mcp")
        for url, process in zip(urls, processes, strict=True):
            wait_listening(url, process)
        yield urls
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def wait_listening(url: str, process: subprocess.Popen[bytes], seconds: float = 180.0) -> None:
    """Until the replica answers HTTP (a loaded machine can take a minute to start one)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"an HTTP replica exited with status {process.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1)
        except urllib.error.HTTPError:
            return  # any HTTP answer: the server listens
        except OSError:
            time.sleep(0.1)
        else:
            return
    raise RuntimeError("an HTTP replica did not start listening")


def children_rss_kb() -> dict[int, int]:
    """Resident set size (kB) of each child process of this one, from /proc (Linux)."""
    found: dict[int, int] = {}
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text(encoding="utf-8")
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("PPid", "0").strip()) == me and "VmRSS" in fields:
            found[int(entry.name)] = int(fields["VmRSS"].split()[0])
    return found
