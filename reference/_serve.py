"""Transports: stdio, and streamable HTTP behind a host bearer token; both with bounded messages."""

from __future__ import annotations

import hmac
from typing import Any

import anyio
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings

from engram_mcp.reference._config import ServerConfig
from engram_mcp.reference._http_deadlines import deadline_protocol
from engram_mcp.reference._http_messages import MessageGuard
from engram_mcp.reference._server import ReferenceServer
from engram_mcp.reference._stdio import stdio_transport

_LOCAL = ("127.0.0.1", "localhost", "[::1]")
MCP_PATH = "/mcp"


def serve_stdio(config: ServerConfig) -> None:
    run_stdio(ReferenceServer(config))


def run_stdio(reference: ReferenceServer) -> None:
    """One session over the bounded stdio transport until the input ends; the server is closed afterwards."""

    async def run() -> None:
        async with stdio_transport(reference.config.transport.max_message_bytes) as (read, write):
            await reference.server.run(read, write, reference.server.create_initialization_options())

    try:
        anyio.run(run)
    finally:
        reference.close()


class BearerGuard:
    """Refuses HTTP requests without the configured host bearer token, before MCP sees them."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            presented = dict(scope.get("headers", [])).get(b"authorization", b"")
            if not hmac.compare_digest(presented, self._expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b'{"error":"unauthorized"}'})
                return
        await self.app(scope, receive, send)


def http_app(reference: ReferenceServer, host: str, port: int) -> Any:
    if not reference.config.http_bearer_token:
        raise ValueError("serving HTTP needs http_bearer_token_file in the configuration")
    # DNS-rebinding protection stays on whatever the bind address: only these Host and Origin values pass.
    names = {*_LOCAL, f"[{host}]" if ":" in host else host}
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:{port}" for name in names],
        allowed_origins=[f"http://{name}:{port}" for name in names],
    )
    max_bytes = reference.config.transport.max_message_bytes
    app = reference.server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, transport_security=security, max_request_body_size=max_bytes
    )
    return BearerGuard(MessageGuard(app, MCP_PATH, max_bytes), reference.config.http_bearer_token)


def serve_http(config: ServerConfig, host: str, port: int) -> None:
    reference = ReferenceServer(config)
    limits = config.transport
    try:
        server = uvicorn.Server(uvicorn.Config(
            http_app(reference, host, port), host=host, port=port, log_level="warning", lifespan="on",
            # h11 pinned (not "auto"), since the deadlines live in its protocol class.
            http=deadline_protocol(limits.http_header_timeout_seconds, limits.http_body_timeout_seconds),
            limit_concurrency=limits.http_max_connections,
        ))
        server.run()
    finally:
        reference.close()
