"""The erasure ledger: a withdraw or a forget is `complete` only once no store file holds what it erased.

Deleting a row takes it out of the live database at once, but every storage
engine keeps older copies for its own reasons for a while: SQLite keeps page
images in the write-ahead log until a checkpoint resets it, and PostgreSQL keeps
dead tuples until VACUUM and WAL segments until they are recycled. A reader
holding an old snapshot (a second process, a backup, a shell) pins them.

So each erasure is written to the ``erasures`` table in the same transaction as
the delete, as `pending`. The backend then tries, briefly, the one step that
drops its old copies (``ResidueFlusher.flush_residues``), and only when that step
succeeds are the erasures committed before it marked `complete`. Whatever is
left pending is retried in the background and after a restart, and
``engram-reference verify`` lists it. Nothing here holds the store's lock while
waiting for other readers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Protocol, TypeVar

from engram_mcp.contract.validation import instant
from engram_mcp.reference._periodic import Periodic
from engram_mcp.reference._ports import Outstanding, Scope, StoreReader, StoreTransaction, Subject

T = TypeVar("T")
SUBJECTS: tuple[Subject, ...] = ("candidate_key", "record_content")


class ResidueFlusher(Protocol):
    """What a backend offers the ledger: units of work, and one step that drops old copies of deleted data."""

    def transaction(self, work: Callable[[StoreTransaction], T]) -> T: ...

    def snapshot(self) -> AbstractContextManager[StoreReader]: ...

    def flush_residues(self) -> bool:
        """Drop every retained copy of deleted data, without blocking for long; True only when all are gone.

        SQLite: a truncating WAL checkpoint that no reader blocks. PostgreSQL, by
        the same rule: no open snapshot older than the erasure (``backend_xmin``
        in ``pg_stat_activity``), a VACUUM of the tables it touched, and a
        CHECKPOINT after which the older WAL segments are recycled (none held
        back for archiving or by a replication slot).
        """
        ...


class ErasureLedger:
    """Records erasures with their delete, settles them when the backend's flush succeeds, retries in the background."""

    def __init__(self, store: ResidueFlusher, *, retry_interval: float = 1.0) -> None:
        self.store = store
        self.retry_interval = retry_interval
        self._settling = threading.Lock()  # one flush attempt at a time; never the store's own lock
        self._retrying = Periodic(self.settle, name="erasure-ledger")

    # -- inside the erasing transaction ---------------------------------------------

    @staticmethod
    def record(tx: StoreTransaction, subject: Subject, scope: Scope, subject_id: str, cursor: int) -> int:
        """Queue an erasure as pending, in the caller's unit of work; its id."""
        if subject not in SUBJECTS:
            raise ValueError("unknown erasure subject")
        return tx.record_erasure(subject, scope, subject_id, cursor, instant(datetime.now(UTC)))

    # -- settling -----------------------------------------------------------------------

    def outstanding(self) -> list[Outstanding]:
        with self.store.snapshot() as reader:
            return reader.outstanding_erasures()

    def settle(self) -> frozenset[int]:
        """One attempt: flush the backend's old copies and mark the erasures it covered complete."""
        with self._settling:
            pending = [o.erasure_id for o in self.outstanding()]
            if not pending or not self.store.flush_residues():
                return frozenset()
            # Every id read above was committed before the flush began, so the flush covered it.
            done = instant(datetime.now(UTC))
            self.store.transaction(lambda tx: tx.complete_erasures(pending, done))
            return frozenset(pending)

    # -- background retry ----------------------------------------------------------------

    def start(self) -> None:
        """Retry pending erasures until ``stop``; the first attempt at once, so a restart resumes them."""
        self._retrying.start(self.retry_interval, at_once=True)

    def stop(self) -> None:
        self._retrying.stop()


def pending_lines(outstanding: list[Outstanding]) -> Iterator[str]:
    """verify's report of outstanding erasures: what, where and since when, never content."""
    for item in outstanding:
        yield (f"erasure {item.erasure_id} pending: {item.subject.replace('_', ' ')} of {item.subject_id} "
               f"in {item.tenant}/{item.workspace}, requested at cursor {item.cursor} ({item.requested_at})")
