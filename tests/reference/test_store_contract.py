"""The MemoryStore port's promises (engram_mcp.reference.testing, shipped with the package), run on every store.

Each shipped test runs once per entry of ``STORE_SITES``; this module adds what only a store of the reference's
can show: broken stores the race checks must catch, and the SQL-level counters and migrations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

import pytest

from engram_mcp.reference._ports import (
    Holdings,
    MemoryStore,
    NewCandidate,
    Scope,
    Sealed,
    StoreTransaction,
)
from engram_mcp.reference._sqlite import sqlite3
from engram_mcp.reference._sqlite_tx import SqliteTransaction
from engram_mcp.reference._store import SqliteStore
from engram_mcp.reference.testing import *  # noqa: F403 - the shipped tests, collected here for both stores
from engram_mcp.reference.testing import (
    SCOPE,
    StoreSite,
    assert_consumed_once,
    assert_gapless_journal,
    assert_reserved_once,
    record,
)
from tests.postgres_support import fresh_postgres_url, postgres_url  # noqa: F401 - the PostgreSQL site's fixtures

T = TypeVar("T")


def sqlite_site(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], MemoryStore]:
    path = tmp_path / "store" / "engram.sqlite3"
    return lambda: SqliteStore(path, erasure_retry_interval=3600)


def postgres_site(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], MemoryStore]:
    """A fresh schema (skipped with the reason when PostgreSQL does not answer); each handle is its own pool."""
    from engram_mcp.reference._postgres import PostgresStore

    url = request.getfixturevalue("fresh_postgres_url")
    return lambda: PostgresStore(url, erasure_retry_interval=3600)


# Each entry: a name and a function of (request, tmp_path) giving a handle opener on a fresh, empty store.
STORE_SITES: dict[str, Callable[[pytest.FixtureRequest, Path], Callable[[], MemoryStore]]] = {
    "sqlite": sqlite_site,
    "postgresql": postgres_site,
}


@pytest.fixture(params=sorted(STORE_SITES))
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreSite]:
    with ExitStack() as handles:
        yield StoreSite(STORE_SITES[request.param](request, tmp_path), handles)


class UnisolatedStore(SqliteStore):
    """A broken store: each primitive is a unit of work of its own, with none around the caller's work.

    Each primitive commits before the next starts, so the store never holds a
    snapshot across the caller's steps: the race shows as a second effect or a
    constraint violation, never as SQLite refusing a stale snapshot.
    """

    def transaction(self, work: Callable[[StoreTransaction], T]) -> T:
        store = self

        class StatementAtATime:
            def __getattr__(self, name: str) -> Any:
                def call(*args: Any, **kwargs: Any) -> Any:
                    with store.write() as db:
                        return getattr(SqliteTransaction(db), name)(*args, **kwargs)

                return call

        return work(StatementAtATime())


class ReplayableConfirmations(SqliteStore):
    """A broken store: a consumed confirmation id is overwritten, so it is accepted again."""

    def transaction(self, work: Callable[[StoreTransaction], T]) -> T:
        class Lenient(SqliteTransaction):
            def consume_confirmation(self, nonce: str, at: str) -> bool:
                self.sql.execute("INSERT OR REPLACE INTO consumed_states VALUES (?, ?)", (nonce, at))
                return True

        with self.write() as db:
            return work(Lenient(db))


def broken(kind: type[SqliteStore], tmp_path: Path) -> list[MemoryStore]:
    return [kind(tmp_path / "broken.sqlite3", erasure_retry_interval=3600) for _ in range(2)]


def test_the_race_checks_catch_broken_stores(tmp_path: Path) -> None:
    """Each race check fails on a store that breaks the promise it checks, so its pass means something."""
    unisolated = broken(UnisolatedStore, tmp_path / "a")
    replayable = broken(ReplayableConfirmations, tmp_path / "b")
    unjournaled = broken(UnisolatedStore, tmp_path / "c")
    try:
        with pytest.raises((AssertionError, sqlite3.IntegrityError)):
            assert_reserved_once(unisolated)
        with pytest.raises(AssertionError):
            assert_consumed_once(replayable)
        with pytest.raises((AssertionError, sqlite3.IntegrityError)):
            assert_gapless_journal(unjournaled)
    finally:
        for store in (*unisolated, *replayable, *unjournaled):
            store.close()


def test_holdings_do_not_depend_on_the_order_admission_writes_in(site: StoreSite) -> None:
    """Record first then candidate, or candidate first then record: the same counters, and forget takes the
    bytes back either way."""
    store = site.open()

    def capture(tx: StoreTransaction, cid: str, rid: str, size: int) -> None:
        tx.store_candidate(NewCandidate(cid, SCOPE, "agent-1", rid, "hmac-sha256:d", 1, Sealed(b"x" * size, b"k"), 0))

    def record_first(tx: StoreTransaction) -> None:
        tx.admit(SCOPE, "cand-1", record("mem_one", "first words"), 2)
        tx.close_candidate(SCOPE, "cand-1", "accepted")

    def candidate_first(tx: StoreTransaction) -> None:
        tx.close_candidate(SCOPE, "cand-2", "accepted")
        tx.admit(SCOPE, "cand-2", record("mem_two", "second words"), 3)

    def both(tx: StoreTransaction) -> None:
        capture(tx, "cand-1", "mem_one", 100)
        capture(tx, "cand-2", "mem_two", 30)

    store.transaction(both)
    with store.snapshot() as reader:
        assert reader.holdings("tenant-a") == reader.holdings("tenant-a", "agent-1") == Holdings(2, 130)
    store.transaction(record_first)
    store.transaction(candidate_first)
    with store.snapshot() as reader:
        assert reader.holdings("tenant-a") == reader.recount_holdings("tenant-a") == Holdings(0, 130)
        assert reader.holdings("tenant-a", "agent-2") == reader.holdings("tenant-b") == Holdings(0, 0)
    store.transaction(lambda tx: tx.forget(SCOPE, "mem_one", "hmac-sha256:gone"))
    with store.snapshot() as reader:
        held = reader.holdings("tenant-a", "agent-1")
        assert held == reader.recount_holdings("tenant-a", "agent-1") == Holdings(0, 30)
        assert not reader.holdings_drift()

    def tamper(tx: StoreTransaction) -> None:  # a counter no trigger wrote: what verify reports
        raw = tx.sql if isinstance(tx, SqliteTransaction) else tx.conn  # type: ignore[attr-defined]  # PostgreSQL's transaction
        raw.execute("UPDATE holdings SET bytes = bytes + 1 WHERE holder = 'tenant'")

    store.transaction(tamper)
    with store.snapshot() as reader:
        assert reader.holdings_drift()


# Rows an older schema (one without the counters) may hold, in every state a candidate and its record can be in,
# and the holdings its migration must count; the SQL runs on both stores.
OLDER_ROWS = (
    "INSERT INTO candidates (candidate_id, tenant, workspace, principal, state, record_id, payload_digest, "
    "created_cursor, created_ms, body_bytes) VALUES "
    "('c1', 't1', 'w1', 'p1', 'pending', 'r1', 'd', 1, 0, 100), "
    "('c2', 't1', 'w1', 'p1', 'accepted', 'r2', 'd', 2, 0, 200), "
    "('c3', 't1', 'w2', 'p2', 'accepted', 'r3', 'd', 3, 0, 50), "
    "('c4', 't1', 'w2', 'p2', 'rejected', 'r4', 'd', 4, 0, 70), "
    "('c5', 't1', 'w2', 'p2', 'withdrawn', 'r5', 'd', 5, 0, 10), "
    "('c6', 't1', 'w2', 'p2', 'pending', 'r6', 'd', 6, 0, 5), "
    "('c7', 't2', 'w1', 'p1', 'accepted', 'r7', 'd', 7, 0, 300), "
    "('c8', 't2', 'w1', 'p1', 'pending', 'r8', 'd', 8, 0, 1)",
    "INSERT INTO records (tenant, workspace, record_id, candidate_id, state, payload_digest, valid_from, "
    "recorded_cursor) VALUES ('t1', 'w1', 'r2', 'c2', 'accepted_current', 'd', 0, 2), "
    "('t1', 'w2', 'r3', 'c3', 'tombstoned', 'd', 0, 3), ('t2', 'w1', 'r7', 'c7', 'accepted_current', 'd', 0, 7)",
)
OLDER_HOLDINGS = {
    ("t1", None): Holdings(2, 305), ("t1", "p1"): Holdings(1, 300), ("t1", "p2"): Holdings(1, 5),
    ("t2", None): Holdings(1, 301), ("t2", "p1"): Holdings(1, 301), ("t2", "p2"): Holdings(0, 0),
}


def assert_migrated_holdings(store: MemoryStore) -> None:
    """The counters a migrated store starts with equal its rows, and its triggers keep them so afterwards."""
    with store.snapshot() as reader:
        for (tenant, principal), held in OLDER_HOLDINGS.items():
            assert reader.holdings(tenant, principal) == reader.recount_holdings(tenant, principal) == held
    store.transaction(lambda tx: tx.close_candidate(Scope("t1", "w1"), "c1", "rejected"))
    with store.snapshot() as reader:
        assert reader.holdings("t1") == reader.recount_holdings("t1") == Holdings(1, 205)
