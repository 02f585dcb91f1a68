"""The bearer bridge: an HTTP reverse proxy that adds the host's bearer token, for clients that cannot send headers.

A server that follows spec/host-wiring.md refuses HTTP requests without the
host bearer token (a transport guard in front of MCP), and serves its tools
only to calls that carry a host binding in ``_meta``. Generic MCP clients, the
official MCP conformance suite among them, can send neither. The bridge sits
between the two: it passes POST, GET and DELETE through as they come, streams
responses back chunk by chunk (so SSE streams stay streams), and adds
``Authorization: Bearer …``.

Host and Origin pass through unchanged, so the server's DNS-rebinding
protection still judges what the client sent. For a client's ``Host:
127.0.0.1:PORT`` to be valid at the server too, the server listens on another
loopback address with the same port (``--upstream http://127.0.0.2:PORT``
behind ``--listen 127.0.0.1:PORT``): the Host the client names is then one the
server itself allows.

Given a profile, the bridge also acts as the host for the 2026-07-28 era: into
a ``tools/list`` or ``tools/call`` request that already carries a ``_meta``
object (every modern-era request does), it adds a fresh binding from the
profile's host. A request without ``_meta`` passes unchanged, so what a client
tests about a missing ``_meta``, and the legacy era, stay as the client sent them.

A client of the bridge never sees why something failed: an unreachable
upstream is a fixed 502, a request the bridge cannot forward a fixed 400, and
a request goes nowhere but the upstream, whatever its target says.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import httpx2

# Hop-by-hop headers (RFC 9110 §7.6.1) belong to one connection, never forwarded.
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding",
                        b"upgrade", b"proxy-authenticate", b"proxy-authorization"})
OWN_RESPONSE_HEADERS = frozenset({b"date", b"server"})  # uvicorn writes its own
BOUND_METHODS = ("tools/list", "tools/call")

Binder = Callable[[], dict[str, Any]]  # the _meta entries that bind one request


def bind(body: bytes, binder: Binder) -> bytes:
    """The body with the binder's entries in params._meta of a tools/list or tools/call that has a _meta object."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested past what the parser follows: the server judges it
        return body
    if not isinstance(message, dict) or message.get("method") not in BOUND_METHODS:
        return body
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return body
    meta.update(binder())
    return json.dumps(message).encode()


async def _plain(send: Any, status: int, text: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(text)).encode())]})
    await send({"type": "http.response.body", "body": text})


class BearerBridge:
    """ASGI app: forwards each HTTP request to ``upstream`` (an origin; the request keeps its path) with the token."""

    def __init__(self, upstream: str, token: str, binder: Binder | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.authorization = f"Bearer {token}".encode()
        self.binder = binder
        self._client: httpx2.AsyncClient | None = None

    def client(self) -> httpx2.AsyncClient:
        if self._client is None:
            # No read timeout: an SSE stream may stay quiet for as long as the session lives.
            self._client = httpx2.AsyncClient(timeout=httpx2.Timeout(10.0, read=None), follow_redirects=False)
        return self._client

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"]
                   if k.lower() not in HOP_BY_HOP and k.lower() not in (b"authorization", b"content-length")]
        headers.append((b"authorization", self.authorization))
        path = scope.get("raw_path") or scope["path"].encode()
        if not path.startswith(b"/"):  # only a path: an absolute-form target must not name another host
            await _plain(send, 400, b"bad request")
            return
        url = self.upstream + path.decode("latin-1")
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        content = bind(bytes(body), self.binder) if self.binder is not None else bytes(body)
        try:
            request = self.client().build_request(scope["method"], url, headers=headers, content=content)
        except (httpx2.InvalidURL, ValueError):  # a path or header the HTTP client refuses to send on
            await _plain(send, 400, b"bad request")
            return
        try:
            response = await self.client().send(request, stream=True)
        except httpx2.HTTPError:
            await _plain(send, 502, b"upstream unavailable")
            return
        try:
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [(k, v) for k, v in response.headers.raw
                                    if k.lower() not in HOP_BY_HOP | OWN_RESPONSE_HEADERS]})
            async with anyio.create_task_group() as group:

                async def watch_disconnect() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    group.cancel_scope.cancel()

                group.start_soon(watch_disconnect)
                try:
                    async for chunk in response.aiter_raw():
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                except (httpx2.HTTPError, httpx2.StreamError, OSError):
                    pass  # the upstream or the client went away mid-stream: the response just ends
                group.cancel_scope.cancel()
        finally:
            await response.aclose()

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._client is not None:
                    await self._client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return
