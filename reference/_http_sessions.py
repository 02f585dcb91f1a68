"""Legacy-era HTTP sessions, bounded per principal and in total, the oldest idle one giving way.

Each ``initialize`` over HTTP opens a session that the SDK keeps (about 40 KB
with its server task) until the client deletes it or it has been idle for
``session_idle_timeout``; at ``max_sessions`` the SDK refuses every new client
503 until one expires. Here the idle timeout is the configured minutes, and a
new session never waits for one to expire: at a bound the least recently used
session with no request in flight (an open event stream counts as one) is
closed instead.

Bounds per principal: a session belongs to no principal until a bound call in
it names one (the binding travels with each tool call, not with the
handshake). The sessions that belong to no principal yet and each principal's
sessions are held to ``per_principal``, so a client opening sessions in a loop
only ever closes its own; all together are held to ``max_sessions``.

Built on the SDK's session manager (mcp pinned in pyproject.toml): it extends
the two steps where a session is admitted and where a request reaches one.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

import anyio
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.routing import Route

log = logging.getLogger("engram_mcp.reference")

_SESSION_HEADER = MCP_SESSION_ID_HEADER.lower().encode("ascii")


class BoundedSessionManager(StreamableHTTPSessionManager):
    def __init__(self, app: Any, *, per_principal: int, **settings: Any) -> None:
        super().__init__(app=app, **settings)
        self.per_principal = per_principal
        self._holders: OrderedDict[str, str | None] = OrderedDict()  # least recently used first
        self._in_flight: dict[str, int] = {}

    # -- the SDK's steps, extended ---------------------------------------------------------------------

    async def _handle_stateful_request(self, scope: Any, receive: Any, send: Any) -> None:
        session_id = next((v.decode("latin-1") for k, v in scope["headers"] if k == _SESSION_HEADER), None)
        if session_id is None or session_id not in self._holders:
            await super()._handle_stateful_request(scope, receive, send)
            return
        self._in_flight[session_id] = self._in_flight.get(session_id, 0) + 1
        self._holders.move_to_end(session_id)
        try:
            await super()._handle_stateful_request(scope, receive, send)
        finally:
            if session_id in self._holders:  # still open: the request may have ended it (a DELETE)
                self._in_flight[session_id] -= 1
                self._holders.move_to_end(session_id)

    def _admit_session(self, requestor: Any) -> StreamableHTTPServerTransport | None:
        self._make_room(self.per_principal, holder=None)
        if self.max_sessions is not None:
            self._make_room(self.max_sessions, everyone=True)
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id is not None:
            self._holders[transport.mcp_session_id] = None
        return transport

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        self._forget(session_id)
        await super()._discard_session(session_id, transport)

    # -- bounds --------------------------------------------------------------------------------------------

    def attribute(self, session_id: str | None, principal: str) -> None:
        """A bound call in the session named ``principal``: the session counts as that principal's from now."""
        if session_id is None or self._holders.get(session_id, principal) == principal:
            return
        self._holders[session_id] = principal
        self._make_room(self.per_principal + 1, holder=principal, keep=session_id)

    @property
    def open_sessions(self) -> int:
        return len(self._holders)

    def _make_room(self, bound: int, *, holder: str | None = None, everyone: bool = False,
                   keep: str | None = None) -> None:
        """Close the least recently used idle sessions of ``holder`` (or of everyone) until fewer than ``bound``
        are held; ``keep`` is never closed."""
        held = [s for s, h in self._holders.items() if everyone or h == holder]
        idle = [s for s in held if s != keep and not self._in_flight.get(s)]
        for session_id in idle[: max(0, len(held) - bound + 1)]:
            self._evict(session_id)

    def _evict(self, session_id: str) -> None:
        transport = self._server_instances.pop(session_id, None)
        self._session_owners.pop(session_id, None)
        self._forget(session_id)
        log.info("closed the least recently used idle HTTP session to make room for a new one")
        if transport is not None and self._task_group is not None:
            self._task_group.start_soon(_terminate, transport)

    def _forget(self, session_id: str) -> None:
        self._holders.pop(session_id, None)
        self._in_flight.pop(session_id, None)


async def _terminate(transport: StreamableHTTPServerTransport) -> None:
    with anyio.CancelScope(shield=True):
        await transport.terminate()


def session_app(manager: BoundedSessionManager, path: str) -> Starlette:
    """The streamable HTTP endpoint at ``path`` served by ``manager``, as the SDK's own app is assembled."""
    return Starlette(routes=[Route(path, endpoint=StreamableHTTPASGIApp(manager))],
                     lifespan=lambda app: manager.run())
