"""uvicorn's HTTP/1.1 protocol (h11) with deadlines on what the client sends.

uvicorn times only the idle gap between keep-alive requests: a client that
opens a connection and sends its headers (or its body) a byte at a time holds
the connection, and a slot of ``limit_concurrency``, for as long as it likes.
This subclass gives each request its deadlines, counted once per phase (a
trickle of bytes does not extend them):

- first byte: from a new connection's opening to its first byte;
- headers: from then, or from the first byte of a later request on a
  kept-alive connection, to the end of the headers;
- body: from the end of the headers to the end of the body.

A connection that misses one is closed. Deadlines are not kept on what the
server sends, so a long event stream is never cut. Until it sends a request
with the bearer token, a connection also holds a place in the unauthenticated
budget (reference/_http_admission.py), which may close it to make room.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from engram_mcp.reference._http_admission import ConnectionBudget

log = logging.getLogger("engram_mcp.reference")


class DeadlineH11Protocol(H11Protocol):
    first_byte_timeout: float = 2.0
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    budget: ConnectionBudget | None = None  # one per configured class, so per server (deadline_protocol)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase: str | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._heard = False  # any byte from the client yet
        self._proven = False
        self._judged: object = None  # the request cycle whose headers were last judged

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn narrows the transport the same way
        super().connection_made(transport)
        if self.budget is not None:
            self.budget.admit(self, self.client[0] if self.client else "")
        self._follow()

    def data_received(self, data: bytes) -> None:
        if not self._heard and self.budget is not None:
            self.budget.heard(self)
        self._heard = True
        super().data_received(data)
        if not self._proven and self.budget is not None and self.cycle is not None and self.cycle is not self._judged:
            self._judged = self.cycle
            self._proven = self.budget.prove(self, self.headers)
        self._follow()

    def shed(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._set_phase(None)
        if self.budget is not None:
            self.budget.forget(self)
        super().connection_lost(exc)

    def _follow(self) -> None:
        """Keep the deadline of the phase the client's half of the connection is in."""
        if self.transport.is_closing():
            self._set_phase(None)
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            # A new connection owes its first request; between requests, uvicorn's keep-alive timer
            # governs until a byte of the next one arrives.
            started = self.cycle is None or bool(self.conn.trailing_data[0])
            self._set_phase(None if not started else "headers" if self._heard else "first byte")
        elif state is h11.SEND_BODY:
            self._set_phase("body")
        else:
            self._set_phase(None)

    def _set_phase(self, phase: str | None) -> None:
        if phase == self._phase:
            return
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase
        if phase is not None:
            timeouts = {"first byte": self.first_byte_timeout, "headers": self.header_timeout}
            timeout = timeouts.get(phase, self.body_timeout)
            self._deadline = self.loop.call_later(timeout, self._expire)

    def _expire(self) -> None:
        log.info("closed an HTTP connection that did not send its %s in time", self._phase)
        self._deadline = None
        self._phase = None
        if not self.transport.is_closing():
            self.transport.close()


def deadline_protocol(
    header_timeout: float, body_timeout: float, *, first_byte_timeout: float = 2.0,
    budget: ConnectionBudget | None = None,
) -> type[DeadlineH11Protocol]:
    """The protocol class to hand to uvicorn.Config(http=...), with these deadlines and this budget."""
    return type("ConfiguredDeadlineH11Protocol", (DeadlineH11Protocol,),
                {"header_timeout": header_timeout, "body_timeout": body_timeout,
                 "first_byte_timeout": first_byte_timeout, "budget": budget})
