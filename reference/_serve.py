"""Transports: stdio, and streamable HTTP behind a host bearer token; both with bounded messages."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import anyio
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings

from engram_mcp.reference._config import ServerConfig
from engram_mcp.reference._http_admission import ConnectionBudget, authorization, presents
from engram_mcp.reference._http_deadlines import deadline_protocol
from engram_mcp.reference._http_messages import MessageGuard
from engram_mcp.reference._http_sessions import BoundedSessionManager, session_app
from engram_mcp.reference._server import ReferenceServer
from engram_mcp.reference._stdio import stdio_transport

_LOCAL = ("127.0.0.1", "localhost", "[::1]")
MCP_PATH = "/mcp"


def serve_stdio(config: ServerConfig) -> None:
    reference = ReferenceServer(config)
    _announce(f"serving MCP over stdio, {store_label(config)}")  # stderr: stdout carries MCP messages only
    run_stdio(reference)


def store_label(config: ServerConfig) -> str:
    """Which store a server opened, for its operator: a PostgreSQL URL without its credentials or options."""
    url = config.store_url or ""
    if url.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(url)
        where = f"{parts.hostname or 'localhost'}{f':{parts.port}' if parts.port else ''}{parts.path}"
        return f"store: PostgreSQL at {where}"
    return f"store: SQLite file {config.store}"


def _announce(line: str) -> None:
    print(f"engram-reference: {line}", file=sys.stderr, flush=True)


class _AnnouncingServer(uvicorn.Server):
    """Says where it listens once the socket is bound (not before: a taken port must not read as served)."""

    def __init__(self, config: uvicorn.Config, line: Callable[[int], str]) -> None:
        super().__init__(config)
        self._line = line

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started:  # the port bound, which is not the one asked for when that was 0
            bound = [s.getsockname()[1] for server in self.servers for s in server.sockets]
            _announce(self._line(bound[0] if bound else self.config.port))


def run_stdio(reference: ReferenceServer) -> None:
    """One session over the bounded stdio transport until the input ends; the server is closed afterwards."""

    async def run() -> None:
        async with stdio_transport(reference.config.transport.max_message_bytes) as (read, write):
            await reference.run(read, write)

    try:
        anyio.run(run)
    finally:
        reference.close()


class BearerGuard:
    """Refuses HTTP requests without the configured host bearer token, before MCP sees them."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = authorization(token)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not presents(scope.get("headers", []), self._expected):
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": b'{"error":"unauthorized"}'})
            return
        await self.app(scope, receive, send)


def http_app(reference: ReferenceServer, host: str, port: int, *,
             guard: Callable[[Any, str], Any] = BearerGuard) -> Any:
    """The streamable HTTP app, behind ``guard`` (the host bearer check: the app and the token in, an ASGI app out)."""
    if not reference.config.http_bearer_token:
        raise ValueError("serving HTTP needs http_bearer_token_file in the configuration")
    # DNS-rebinding protection stays on whatever the bind address: only these Host and Origin values pass.
    names = {*_LOCAL, f"[{host}]" if ":" in host else host}
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:{port}" for name in names],
        allowed_origins=[f"http://{name}:{port}" for name in names],
    )
    limits = reference.config.transport
    sessions = BoundedSessionManager(
        reference.server, per_principal=limits.http_sessions_per_principal, security_settings=security,
        max_request_body_size=limits.max_message_bytes, max_sessions=limits.http_max_sessions,
        session_idle_timeout=60 * limits.http_session_idle_minutes,
    )
    reference.on_bound_call = sessions.attribute
    app = session_app(sessions, MCP_PATH)
    return guard(MessageGuard(app, MCP_PATH, limits.max_message_bytes), reference.config.http_bearer_token)


def serve_http(config: ServerConfig, host: str, port: int) -> None:
    reference = ReferenceServer(config)
    limits = config.transport
    if not config.http_bearer_token:
        raise ValueError("serving HTTP needs http_bearer_token_file in the configuration")
    budget = ConnectionBudget(total=limits.http_unauthenticated_connections,
                              per_source=limits.http_unauthenticated_per_source,
                              expected=authorization(config.http_bearer_token))
    try:
        shown = f"[{host}]" if ":" in host else host
        server = _AnnouncingServer(uvicorn.Config(
            http_app(reference, host, port), host=host, port=port, log_level="warning", lifespan="on",
            # h11 pinned (not "auto"), since the deadlines live in its protocol class.
            http=deadline_protocol(limits.http_header_timeout_seconds, limits.http_body_timeout_seconds,
                                   first_byte_timeout=limits.http_first_byte_timeout_seconds, budget=budget),
            # Unauthenticated connections hold at most their own budget, so authenticated ones always have
            # http_max_connections places.
            limit_concurrency=limits.http_max_connections + limits.http_unauthenticated_connections,
        ), lambda bound: f"listening on http://{shown}:{bound}{MCP_PATH} (streamable HTTP, bearer token required), "
                         f"{store_label(config)}")
        server.run()
    finally:
        reference.close()
