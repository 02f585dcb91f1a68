"""Group commit: writes that arrive while one is being committed are committed together, in one unit of work.

Every audit row is written under the store's writers' lock, and refused calls
can be sent by anyone at any rate: one unit of work per row let a flood of
refusals hold that lock for everyone else. Here a caller hands its row in and
waits until it is committed, as before; but while one unit of work is being
committed, the rows handed in meanwhile wait for it and then go in the next
one together, so a flood costs one lock per batch rather than one per row. A
lone call commits at once, as before. A failed batch fails each of its callers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")

BATCH_AT_MOST = 256  # rows in one unit of work: a batch holds the lock for a bounded time


class _Ticket(Generic[T]):
    __slots__ = ("done", "error", "item")

    def __init__(self, item: T) -> None:
        self.item = item
        self.done = False
        self.error: BaseException | None = None


class GroupCommit(Generic[T]):
    """Commits items with ``write`` (one unit of work for the whole sequence), batching concurrent callers."""

    def __init__(self, write: Callable[[Sequence[T]], None], *, batch_at_most: int = BATCH_AT_MOST) -> None:
        self._write = write
        self._batch_at_most = batch_at_most
        self._changed = threading.Condition()
        self._waiting: list[_Ticket[T]] = []
        self._writing = False

    def commit(self, item: T) -> None:
        """Return once ``item`` is committed; raise what its batch's unit of work raised."""
        ticket = _Ticket(item)
        with self._changed:
            self._waiting.append(ticket)
            while self._writing and not ticket.done:
                self._changed.wait()
            if ticket.done:
                return _settled(ticket)
            # No one is writing: lead the next batch, ours first, then those waiting longest.
            self._waiting.remove(ticket)
            batch = [ticket, *self._waiting[: self._batch_at_most - 1]]
            del self._waiting[: self._batch_at_most - 1]
            self._writing = True
        error: BaseException | None = None
        try:
            self._write([t.item for t in batch])
        except BaseException as failed:  # handed to every caller of the batch, re-raised in each
            error = failed
        with self._changed:
            for done in batch:
                done.done, done.error = True, error
            self._writing = False
            self._changed.notify_all()
        return _settled(ticket)


def _settled(ticket: _Ticket[T]) -> None:
    if ticket.error is not None:
        raise ticket.error
