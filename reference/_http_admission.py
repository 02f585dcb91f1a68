"""A budget for HTTP connections that have not yet shown the host's bearer token.

Anyone who can reach the port can open connections, and uvicorn counts every
open connection against ``limit_concurrency``: a hundred idle sockets used to
answer every authenticated client 503 until their header deadline. Here a
connection is *unproven* from its opening until it sends a complete request
whose ``Authorization`` is the bearer token; unproven connections have a
small budget of their own, ``total``, of which one source address may hold at
most ``per_source``. Past either bound unproven connections (of that source, or
of all) are closed to make room: the oldest that have sent nothing, then the
oldest, but only once they have had ``grace`` to speak, so that a burst of new
connections cannot close a client's before its request (already on the wire)
is read. A flood of idle or slow connections thus only ever displaces itself,
while a client that sends its request at once is proven within milliseconds.
uvicorn's cap counts the proven connections' bound plus this budget, so
unproven ones never fill it.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("engram_mcp.reference")


def authorization(token: str) -> bytes:
    """The ``Authorization`` header value that proves a request comes from the host."""
    return f"Bearer {token}".encode()


def presents(headers: Iterable[tuple[bytes, bytes]], expected: bytes) -> bool:
    """Whether the request's headers (names lowercased, as ASGI and uvicorn give them) carry ``expected``."""
    presented = dict(headers).get(b"authorization", b"")
    return hmac.compare_digest(presented, expected)


class Shed(Protocol):
    def shed(self) -> None:
        """Close the connection: it lost its place in the budget."""


GRACE = 0.1  # seconds a new connection has to send its first bytes before it can be made to give way


@dataclass
class _Held:
    source: str
    since: float
    heard: bool = False


class ConnectionBudget:
    """Unproven connections, oldest first, with their source addresses; one per server, on its event loop."""

    def __init__(self, *, total: int, per_source: int, expected: bytes, grace: float = GRACE) -> None:
        self.total, self.per_source, self.expected, self.grace = total, per_source, expected, grace
        self._held: dict[Shed, _Held] = {}  # insertion order is age
        self._timer: asyncio.TimerHandle | None = None

    def admit(self, connection: Shed, source: str) -> None:
        """Count a new connection, then make room within its source's bound and the total."""
        self._held[connection] = _Held(source, time.monotonic())
        self._trim()

    def heard(self, connection: Shed) -> None:
        """The connection sent its first bytes: it is closed to make room only after every silent one."""
        held = self._held.get(connection)
        if held is not None:
            held.heard = True

    def prove(self, connection: Shed, headers: Iterable[tuple[bytes, bytes]]) -> bool:
        """Whether a request with these headers proves the connection (it then leaves the budget for good)."""
        if presents(headers, self.expected):
            self.forget(connection)
            return True
        return False

    def forget(self, connection: Shed) -> None:
        self._held.pop(connection, None)

    @property
    def unproven(self) -> int:
        return len(self._held)

    def _trim(self) -> None:
        """Close the connections past a bound that have had their grace; come back when the next one has."""
        now = time.monotonic()
        ripe = [c for c, held in self._held.items() if now - held.since >= self.grace]
        ripe.sort(key=lambda c: self._held[c].heard)  # stable: silent ones first, each group oldest first
        by_source: dict[str, int] = {}
        for held in self._held.values():
            by_source[held.source] = by_source.get(held.source, 0) + 1
        for connection in ripe:
            source = self._held[connection].source
            if by_source[source] > self.per_source or len(self._held) > self.total:
                by_source[source] -= 1
                self._evict(connection)
        if (len(self._held) > self.total or max(by_source.values(), default=0) > self.per_source) and (
            self._timer is None
        ):
            first = min(held.since for held in self._held.values()) + self.grace
            self._timer = asyncio.get_running_loop().call_later(max(0.0, first - now) + 0.001, self._retrim)

    def _retrim(self) -> None:
        self._timer = None
        self._trim()

    def _evict(self, connection: Shed) -> None:
        self.forget(connection)
        log.info("closed an unauthenticated HTTP connection to stay within the budget")
        connection.shed()
