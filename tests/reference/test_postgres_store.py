"""PostgresStore against a real PostgreSQL: exactly once across replicas, scope isolation, the index, erasure.

Each test that races works with two stores, two pools on one schema, as two
server replicas would, and shows its check failing against a deliberately
broken store (``ReadCommittedStore``: no SERIALIZABLE, no retry), so a pass
means something. Skipped with the reason when PostgreSQL does not answer
(CI fails first instead: .ci/run probes it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import psycopg
import pytest

from engram_mcp.contract import ZERO_DIGEST
from engram_mcp.reference._ports import (
    JournalEntry,
    NewCandidate,
    Reservation,
    Scope,
    Sealed,
    StoreTransaction,
)
from engram_mcp.reference._postgres import PostgresStore
from engram_mcp.reference._postgres_queries import SEARCH_SQL, search_parameters
from tests.postgres_support import fresh_postgres_url, postgres_url

__all__ = ["fresh_postgres_url", "postgres_url"]  # the fixtures, imported for pytest to find

T = TypeVar("T")
SCOPE, OTHER = Scope("acme", "research"), Scope("globex", "research")
RACERS_PER_STORE = 4


class ReadCommittedStore(PostgresStore):
    """A broken variant: each unit of work at READ COMMITTED, run once; lost races go unnoticed."""

    def transaction(self, work: Callable[[StoreTransaction], T]) -> T:
        from engram_mcp.reference._postgres_queries import PostgresTransaction

        with self._pool.connection() as conn, conn.transaction():
            return work(PostgresTransaction(conn))


@pytest.fixture
def stores(fresh_postgres_url: str) -> Iterator[list[PostgresStore]]:
    pair = [PostgresStore(fresh_postgres_url, background=False) for _ in range(2)]
    yield pair
    for store in pair:
        store.close()


def race(stores: Sequence[PostgresStore], work: Callable[[StoreTransaction], T]) -> list[T | BaseException]:
    """Run ``work`` from several threads per store at once (a barrier lines them up); each result or error."""
    results: list[T | BaseException] = []
    lock = threading.Lock()
    racers = [store for store in stores for _ in range(RACERS_PER_STORE)]
    barrier = threading.Barrier(len(racers))

    def run(store: PostgresStore) -> None:
        barrier.wait()
        try:
            outcome: T | BaseException = store.transaction(work)
        except Exception as problem:  # a lost race that surfaced instead of replaying
            outcome = problem
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=run, args=(store,)) for store in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def capture_like(key: str) -> Callable[[StoreTransaction], str]:
    """What the engine's capture does with the store: replay a reservation, or append, store and reserve."""

    def work(tx: StoreTransaction) -> str:
        if tx.reservation(SCOPE, "agent", key) is not None:
            return "replayed"
        cursor, previous = tx.journal_head()
        tx.journal_append(JournalEntry(cursor + 1, SCOPE, {"operation": "capture", "key": key},
                                       f"sha256:{cursor + 1:064x}", previous))
        tx.store_candidate(NewCandidate(f"cand-{key}-{cursor + 1}", SCOPE, "agent", f"rec-{cursor + 1}", "d",
                                        cursor + 1, Sealed(b"sealed", b"key"), 0))
        tx.reserve(SCOPE, "agent", key, Reservation("intent", {"cursor": cursor + 1}))
        return "effect"

    return work


def effects(store: PostgresStore) -> int:
    with store.snapshot() as reader:
        return sum(1 for entry in reader.journal() if entry.event.get("operation") == "capture")


def test_one_idempotency_key_raced_across_two_replicas_has_exactly_one_effect(stores: list[PostgresStore]) -> None:
    results = race(stores, capture_like("raced-key"))
    assert sorted(map(str, results)) == ["effect"] + ["replayed"] * (len(results) - 1)
    assert effects(stores[1]) == 1
    with stores[0].snapshot() as reader:
        entries = list(reader.journal())
    assert [e.cursor for e in entries] == list(range(1, len(entries) + 1))
    assert entries[0].previous_hash == ZERO_DIGEST


def test_the_race_check_catches_a_store_without_serializable_retries(fresh_postgres_url: str) -> None:
    broken = [ReadCommittedStore(fresh_postgres_url, background=False) for _ in range(2)]
    try:
        results = race(broken, capture_like("raced-key"))
    finally:
        for store in broken:
            store.close()
    # Either several effects committed, or a lost race surfaced as an error instead of a replay.
    assert results.count("effect") > 1 or any(isinstance(r, BaseException) for r in results)


def test_a_confirmation_id_is_single_use_across_replicas(stores: list[PostgresStore]) -> None:
    results = race(stores, lambda tx: tx.consume_confirmation("nonce-1", "2026-01-01T00:00:00Z"))
    assert sorted(results, key=str) == [False] * (len(results) - 1) + [True]


def test_the_single_use_check_catches_a_store_that_does_not_check(fresh_postgres_url: str) -> None:
    class Forgetful(PostgresStore):
        def transaction(self, work: Callable[[StoreTransaction], T]) -> T:
            result = super().transaction(work)
            if result is False:  # pretends the id was fresh
                return True  # type: ignore[return-value]
            return result

    broken = [Forgetful(fresh_postgres_url, background=False) for _ in range(2)]
    try:
        results = race(broken, lambda tx: tx.consume_confirmation("nonce-1", "2026-01-01T00:00:00Z"))
    finally:
        for store in broken:
            store.close()
    assert results.count(True) > 1


def admitted(words: str, record_id: str) -> dict[str, Any]:
    return {
        "record_id": record_id,
        "payload_digest": f"digest-{record_id}",
        "valid_time": {"t": 0},
        "retention": {},
        "primary_component_id": "c1",
        "components": [{"component_id": "c1", "kind": "decision", "text": words}],
        "citations": [],
    }


def admit(store: PostgresStore, scope: Scope, record_id: str, words: str) -> None:
    store.transaction(lambda tx: tx.admit(scope, f"cand-{record_id}", admitted(words, record_id), 1))


def test_search_matches_and_ranks_within_the_scope_only(stores: list[PostgresStore]) -> None:
    store = stores[0]
    admit(store, SCOPE, "r-once", "harbour crane")
    admit(store, SCOPE, "r-twice", "harbour harbour crane lighthouse")
    with store.snapshot() as reader:
        alone = reader.search(SCOPE, ["harbour", "crane"], 1, 50)
    for n in range(30):  # another scope full of the same words, and of one rarer word
        admit(store, OTHER, f"o-{n}", "harbour " * (n % 5 + 1) + "crane")
    with store.snapshot() as reader:
        assert reader.search(SCOPE, ["harbour", "crane"], 1, 50) == alone  # same matches, same order
        assert set(alone) == {"r-once", "r-twice"}
        assert not set(reader.search(OTHER, ["lighthouse"], 1, 50))
        assert reader.search(Scope("acme", "ops"), ["harbour"], 1, 50) == []


def test_search_is_served_by_the_gin_index_not_a_scan_of_the_scope(
    stores: list[PostgresStore], fresh_postgres_url: str
) -> None:
    def fill(tx: StoreTransaction) -> None:
        for n in range(3000):  # one scope large enough that the planner weighs a scan of it against the index
            tx.admit(SCOPE, f"cand-{n}", admitted(f"common filler{n % 97} words", f"r-{n}"), 1)
        tx.admit(SCOPE, "cand-rare", admitted("quetzal common", "r-rare"), 1)

    stores[0].transaction(fill)
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        conn.execute("ANALYZE records")
        # The store's own statement and parameters, as it runs them.
        with stores[0].snapshot() as reader:
            assert reader.search(SCOPE, ["quetzal"], 1, 10) == ["r-rare"]
        plan = "\n".join(row[0] for row in conn.execute(
            "EXPLAIN " + SEARCH_SQL, search_parameters(SCOPE, ["quetzal"], 1, 10)
        ))
    assert "records_search" in plan, plan
    assert "Seq Scan" not in plan and "records_pkey" not in plan, plan


def dead_copies(url: str, needle: bytes) -> int:
    """Heap tuples of ``records`` (live or dead, as the pages hold them) whose bytes contain ``needle``."""
    with psycopg.connect(url, autocommit=True) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()[0]
        conn.execute(f"CREATE EXTENSION IF NOT EXISTS pageinspect SCHEMA {schema}")
        pages = conn.execute("SELECT pg_relation_size('records') / current_setting('block_size')::int").fetchone()[0]
        found = 0
        for page in range(pages):
            for (data,) in conn.execute(
                "SELECT t_data FROM heap_page_items(get_raw_page('records', %s)) WHERE t_data IS NOT NULL", (page,)
            ):
                found += needle in bytes(data)
        return found


def test_an_erasure_is_complete_only_once_no_snapshot_can_read_the_old_row(
    stores: list[PostgresStore], fresh_postgres_url: str
) -> None:
    store = stores[0]
    admit(store, SCOPE, "r-gone", "zanzibar marmalade")
    with psycopg.connect(fresh_postgres_url) as reader:  # an old snapshot, as a backup or a shell would hold
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM records").fetchone()
        store.transaction(lambda tx: tx.forget(SCOPE, "r-gone", "keyed"))
        assert store.flush_residues() is False  # the reader could still see the text
        assert dead_copies(fresh_postgres_url, b"zanzibar") >= 1
        reader.execute("COMMIT")
    assert store.flush_residues() is True
    assert dead_copies(fresh_postgres_url, b"zanzibar") == 0
    with store.snapshot() as snapshot:
        assert snapshot.search(SCOPE, ["zanzibar"], 1, 10) == []
        record = snapshot.record(SCOPE, "r-gone")
    assert record is not None and record.state == "tombstoned" and record.body is None


def test_replicas_starting_together_migrate_once(fresh_postgres_url: str) -> None:
    opened: list[PostgresStore] = []
    barrier = threading.Barrier(3)

    def start() -> None:
        barrier.wait()
        opened.append(PostgresStore(fresh_postgres_url, background=False))

    threads = [threading.Thread(target=start) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert len(opened) == 3 and {s.schema_version for s in opened} == {1}
        with psycopg.connect(fresh_postgres_url) as conn:
            assert conn.execute("SELECT count(*) FROM schema_versions").fetchone()[0] == 1
    finally:
        for store in opened:
            store.close()
