"""A reverse proxy that adds the host's bearer token to every request, for clients that cannot send headers.

The reference server refuses HTTP requests without the host bearer token
(a transport guard in front of MCP). The official MCP conformance suite has no
way to send one, so the tests put this proxy between the two. It passes POST,
GET and DELETE through as they come, streams responses back chunk by chunk
(so SSE streams stay streams), and adds only ``Authorization: Bearer …``.

Host and Origin pass through unchanged, so the server's DNS-rebinding
protection still judges what the client sent. For a client's ``Host:
127.0.0.1:PORT`` to be valid at the server too, run the server on another
loopback address with the same port (``--upstream http://127.0.0.2:PORT``
behind ``--listen 127.0.0.1:PORT``): the Host the client names is then one
the server itself allows.

    python tests/thirdparty/bearer_proxy.py --listen 127.0.0.1:PORT \\
        --upstream http://127.0.0.2:PORT --token-file keys/http-bearer.txt

With ``--bind-as PROFILE`` it also acts as the host for the 2026-07-28 era: into
a ``tools/list`` or ``tools/call`` request that already carries a ``_meta``
object (every modern-era request does), it adds a fresh host binding minted
with that conformance profile's key, for the profile's first scope and
principal. A request without ``_meta`` passes unchanged, so what the suite
tests about a missing ``_meta``, and the legacy era, stay as the client sent them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2

from engram_mcp.contract.binding import HOST_BINDING_META_KEY, load_private_key, mint_binding

# Hop-by-hop headers (RFC 9110 §7.6.1) belong to one connection, never forwarded.
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding",
                        b"upgrade", b"proxy-authenticate", b"proxy-authorization"})
OWN_RESPONSE_HEADERS = frozenset({b"date", b"server"})  # uvicorn writes its own


Binder = Callable[[], str]


def profile_binder(profile_file: Path) -> Binder:
    """Mint host bindings as the conformance profile's test host does (spec/host-profile.md §1)."""
    profile = tomllib.loads(profile_file.read_text(encoding="utf-8"))
    host, scope = profile["binding"], profile["scopes"][0]
    key = load_private_key((profile_file.parent / host["private_key_file"]).read_bytes())
    principal = next(iter(scope["principals"]))

    def binding() -> str:
        return mint_binding(key, host["kid"], audience=profile["target"]["audience"], issuer=host["issuer"],
                            tenant=scope["tenant"], workspace=scope["workspace"], principal=principal,
                            agent_id="official-suite", session="official-suite", purpose_ref=host["purpose_ref"],
                            lifetime=60)

    return binding


def bind(body: bytes, binding: Binder) -> bytes:
    """The body with a host binding in params._meta of a tools/list or tools/call that has a _meta object."""
    try:
        message = json.loads(body)
    except ValueError:
        return body
    if not isinstance(message, dict) or message.get("method") not in ("tools/list", "tools/call"):
        return body
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return body
    meta[HOST_BINDING_META_KEY] = binding()
    return json.dumps(message).encode()


class BearerProxy:
    """ASGI app: forwards each HTTP request to ``upstream`` with the bearer token added."""

    def __init__(self, upstream: str, token: str, binding: Binder | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.authorization = f"Bearer {token}".encode()
        self.binding = binding
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
        url = self.upstream + scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        content = bind(bytes(body), self.binding) if self.binding is not None else bytes(body)
        request = self.client().build_request(scope["method"], url, headers=headers, content=content)
        try:
            response = await self.client().send(request, stream=True)
        except httpx2.HTTPError:
            await send({"type": "http.response.start", "status": 502, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"upstream unavailable"})
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
                except (httpx2.HTTPError, OSError):
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


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    parser = argparse.ArgumentParser(description="Add the host bearer token to every request to an MCP endpoint.")
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    parser.add_argument("--upstream", required=True, metavar="URL", help="e.g. http://127.0.0.2:PORT")
    parser.add_argument("--token-file", required=True, type=Path)
    parser.add_argument("--bind-as", type=Path, metavar="PROFILE",
                        help="add a host binding to modern-era tools/list and tools/call, minted for this profile")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    token = args.token_file.read_text(encoding="utf-8").strip()
    binder = profile_binder(args.bind_as) if args.bind_as is not None else None
    uvicorn.run(BearerProxy(args.upstream, token, binder), host=host, port=int(port), log_level="warning",
                lifespan="on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
