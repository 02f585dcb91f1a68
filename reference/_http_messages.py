"""The same answer over HTTP as over stdio for a POST body that is not a valid message.

The SDK's two HTTP entries disagree: the 2026 one answers as ``_jsonrpc``
does, but the handshake-era one acknowledges a request with an unusable id
(``"id": null``, ``1.5``, ``{}``) with 202 and no answer, and refuses a
malformed envelope with -32602 and the validator's text, input values
included. This guard judges each POST body with ``_jsonrpc.classify`` first:
a refusal is sent from here (HTTP 400, or 413 over the size cap), a dropped
notification or response is acknowledged with 202, and a valid message goes
on to the SDK with its body replayed untouched.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from engram_mcp.reference._jsonrpc import TOO_LARGE, Refusal, classify, refusal


class _Gone(Enum):
    """The client left before its body was whole (an enum member, so the type says it apart from bytes)."""

    GONE = "gone"


_GONE = _Gone.GONE


class MessageGuard:
    def __init__(self, app: Any, path: str, max_body_bytes: int) -> None:
        self.app = app
        self.path = path
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        body = await self._body(scope, receive)
        if body is _GONE:
            return  # the client left (or missed its body deadline): nobody to answer
        if body is None:
            await _answer(send, 413, refusal(TOO_LARGE))
            return
        judged = classify(body)
        if judged is None:
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if isinstance(judged, Refusal):
            await _answer(send, 400, judged)
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _body(self, scope: dict[str, Any], receive: Any) -> bytes | Literal[_Gone.GONE] | None:
        """The whole body; None once it passes the cap (declared or sent), nothing past it kept; _GONE on a
        disconnect."""
        declared = dict(scope.get("headers", [])).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            return None
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return _GONE
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                return None
            if not message.get("more_body", False):
                return bytes(body)


async def _answer(send: Any, status: int, refused: Refusal) -> None:
    payload = refused.reply.model_dump_json(by_alias=True, exclude_unset=True).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})
