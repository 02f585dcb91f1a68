"""The MemoryStore port's promises, checked on every store implementation.

Each test runs once per entry of ``STORE_SITES``: a site opens one or more
handles on the same underlying store (two handles stand for two server
processes sharing it). Races line threads up on a barrier across both handles,
so a store that checked and wrote in separate steps would show two effects.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from engram_mcp.contract import ZERO_DIGEST
from engram_mcp.contract.binding import Binding
from engram_mcp.reference._audit import MAIN, AuditJournal
from engram_mcp.reference._core import Engine, ScopePolicy
from engram_mcp.reference._crypto import AesGcmCipher
from engram_mcp.reference._journal import append_event, journal_problems
from engram_mcp.reference._policy import AcceptAll
from engram_mcp.reference._ports import (
    AdmissionDecision,
    CandidateView,
    Holdings,
    MemoryStore,
    NewCandidate,
    Reservation,
    Scope,
    Sealed,
    StoreTransaction,
)
from engram_mcp.reference._quotas import Expiry, ResourceLimits
from engram_mcp.reference._sqlite import sqlite3
from engram_mcp.reference._sqlite_tx import SqliteTransaction
from engram_mcp.reference._store import SqliteStore
from tests.postgres_support import fresh_postgres_url, postgres_url  # noqa: F401  (the PostgreSQL site's fixtures)

T = TypeVar("T")
SCOPE, OTHER = Scope("tenant-a", "workspace-1"), Scope("tenant-b", "workspace-1")
RACERS_PER_HANDLE = 4


@dataclass
class StoreSite:
    """Opens handles on one store; every handle is closed when the test ends."""

    open_handle: Callable[[], MemoryStore]
    handles: ExitStack

    def open(self) -> MemoryStore:
        store = self.open_handle()
        self.handles.callback(store.close)
        return store


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


def race(stores: list[MemoryStore], work: Callable[[StoreTransaction], T]) -> list[T]:
    """Run ``work`` as a unit of work from several threads per handle at once; every result (errors re-raised)."""
    racers = [store for store in stores for _ in range(RACERS_PER_HANDLE)]
    barrier = threading.Barrier(len(racers))
    results: list[T] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(store: MemoryStore) -> None:
        barrier.wait()
        try:
            outcome = store.transaction(work)
        except BaseException as problem:  # reported to the test below
            with lock:
                errors.append(problem)
            return
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=run, args=(store,)) for store in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    if errors:
        raise errors[0]
    return results


# -- idempotency ------------------------------------------------------------------------------------------------


def reserve_once(tx: StoreTransaction) -> bool:
    """The engine's pattern: check the key, make the effect, reserve the key; a pause widens the race."""
    if tx.reservation(SCOPE, "agent-1", "key-1") is not None:
        return False
    time.sleep(0.005)
    append_event(tx, SCOPE, {"operation": "capture"})  # the effect the reservation guards
    tx.reserve(SCOPE, "agent-1", "key-1", Reservation("intent-1", {"status": "committed_pending"}))
    return True


def assert_reserved_once(stores: list[MemoryStore]) -> None:
    effects = race(stores, reserve_once)
    assert effects.count(True) == 1, effects
    assert len(effects) == len(stores) * RACERS_PER_HANDLE
    with stores[0].snapshot() as reader:
        assert reader.scope_cursor(SCOPE) == 1  # one effect in the journal
        assert reader.reservation(SCOPE, "agent-1", "key-1") == Reservation("intent-1", {"status": "committed_pending"})


def test_a_key_raced_from_two_handles_is_reserved_exactly_once(site: StoreSite) -> None:
    assert_reserved_once([site.open(), site.open()])


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


def test_keys_are_per_principal_and_per_scope(site: StoreSite) -> None:
    store = site.open()

    def reserve_all(tx: StoreTransaction) -> None:
        for scope, principal, intent in ((SCOPE, "agent-1", "a"), (SCOPE, "agent-2", "b"), (OTHER, "agent-1", "c")):
            tx.reserve(scope, principal, "shared-key", Reservation(intent, {"n": intent}))

    store.transaction(reserve_all)
    with store.snapshot() as reader:
        assert reader.reservation(SCOPE, "agent-1", "shared-key") == Reservation("a", {"n": "a"})
        assert reader.reservation(SCOPE, "agent-2", "shared-key") == Reservation("b", {"n": "b"})
        assert reader.reservation(OTHER, "agent-1", "shared-key") == Reservation("c", {"n": "c"})
        assert reader.reservation(OTHER, "agent-2", "shared-key") is None


def test_a_failed_unit_of_work_leaves_nothing(site: StoreSite) -> None:
    store = site.open()

    def fail_late(tx: StoreTransaction) -> None:
        append_event(tx, SCOPE, {"operation": "capture"})
        tx.reserve(SCOPE, "agent-1", "key-1", Reservation("intent-1", {}))
        tx.record_erasure("candidate_key", SCOPE, "cand-1", 1, "2026-01-15T12:00:00.000Z")
        raise RuntimeError("refused after writing")

    with pytest.raises(RuntimeError):
        store.transaction(fail_late)
    with store.snapshot() as reader:
        assert reader.reservation(SCOPE, "agent-1", "key-1") is None
        assert reader.journal_head() == (0, ZERO_DIGEST)
        assert reader.outstanding_erasures() == []


# -- confirmation ids ---------------------------------------------------------------------------------------------


def test_a_confirmation_id_is_consumed_once_under_a_race(site: StoreSite) -> None:
    assert_consumed_once([site.open(), site.open()])


def assert_consumed_once(stores: list[MemoryStore]) -> None:
    burnt = race(stores, lambda tx: tx.consume_confirmation("nonce-1", "2026-01-15T12:00:00.000Z"))
    assert burnt.count(True) == 1, burnt
    assert stores[0].transaction(lambda tx: tx.consume_confirmation("nonce-1", "2026-01-15T12:00:01.000Z")) is False
    assert stores[1].transaction(lambda tx: tx.consume_confirmation("nonce-2", "2026-01-15T12:00:01.000Z")) is True


def test_purged_confirmation_ids_are_only_the_old_ones(site: StoreSite) -> None:
    store = site.open()
    store.transaction(lambda tx: tx.consume_confirmation("old", "2026-01-15T12:00:00.000Z"))
    store.transaction(lambda tx: tx.consume_confirmation("new", "2026-01-15T13:00:00.000Z"))
    store.transaction(lambda tx: tx.purge_confirmations("2026-01-15T12:30:00.000Z"))
    assert store.transaction(lambda tx: tx.consume_confirmation("new", "2026-01-15T13:00:01.000Z")) is False
    assert store.transaction(lambda tx: tx.consume_confirmation("old", "2026-01-15T13:00:01.000Z")) is True


# -- journal --------------------------------------------------------------------------------------------------------


def test_journal_appends_raced_from_two_handles_stay_one_gapless_chain(site: StoreSite) -> None:
    assert_gapless_journal([site.open(), site.open()])


def slow_append(tx: StoreTransaction) -> int:
    """Read the head, pause (widening the race), append after it: the engine's journal pattern."""
    tx.journal_head()
    time.sleep(0.005)
    return append_event(tx, SCOPE, {"operation": "capture"})[0]


def assert_gapless_journal(stores: list[MemoryStore]) -> None:
    cursors = race(stores, slow_append)
    assert sorted(cursors) == list(range(1, len(cursors) + 1))
    stores[0].transaction(lambda tx: append_event(tx, OTHER, {"operation": "capture"}))
    with stores[1].snapshot() as reader:
        entries = list(reader.journal())
        assert [e.cursor for e in entries] == list(range(1, len(cursors) + 2))
        assert journal_problems(reader) == []
        assert reader.scope_cursor(SCOPE) == len(cursors)
        assert reader.scope_cursor(OTHER) == len(cursors) + 1
        assert reader.scope_cursor(Scope("tenant-c", "none")) == 0


# -- erasure queue ----------------------------------------------------------------------------------------------------


def test_erasures_queue_in_order_and_complete_only_when_marked(site: StoreSite) -> None:
    store = site.open()
    first = store.transaction(lambda tx: tx.record_erasure("candidate_key", SCOPE, "cand-1", 1, "t1"))
    second = store.transaction(lambda tx: tx.record_erasure("record_content", OTHER, "mem-1", 2, "t2"))
    with store.snapshot() as reader:
        queued = reader.outstanding_erasures()
        assert [(o.erasure_id, o.subject, o.tenant, o.subject_id) for o in queued] == [
            (first, "candidate_key", "tenant-a", "cand-1"), (second, "record_content", "tenant-b", "mem-1")]
        assert not reader.erasure_complete(first)
    store.transaction(lambda tx: tx.complete_erasures([first], "t3"))
    with store.snapshot() as reader:
        assert reader.erasure_complete(first) and not reader.erasure_complete(second)
        assert [o.erasure_id for o in reader.outstanding_erasures()] == [second]


# -- records, search and per-scope isolation ------------------------------------------------------------------------


def record(rid: str, text: str, t: int = 0) -> dict[str, Any]:
    return {
        "record_id": rid,
        "payload_digest": f"sha256:{rid}",
        "valid_time": {"t": t},
        "retention": {"derivative_rule": "make-ineligible"},
        "primary_component_id": "c1",
        "components": [{"component_id": "c1", "kind": "decision", "text": text}],
        "citations": [],
    }


def admit(store: MemoryStore, scope: Scope, rid: str, text: str) -> None:
    store.transaction(lambda tx: tx.admit(scope, f"cand-{rid}", record(rid, text), 1))


NOW_MS = 1_768_478_400_000  # 2026-01-15T12:00:00Z


def test_search_sees_only_its_scope_and_no_other_scope_moves_its_order(site: StoreSite) -> None:
    store = site.open()
    admit(store, SCOPE, "mem_alpha", "alpha alpha kept")
    admit(store, SCOPE, "mem_beta", "beta kept")
    admit(store, OTHER, "mem_shared", "alpha beta")  # same words, other scope
    with store.snapshot() as reader:
        alone = reader.search(SCOPE, ["alpha", "beta"], NOW_MS, 100)
    assert sorted(alone) == ["mem_alpha", "mem_beta"]
    # Many records in another scope that would change any shared statistic of "alpha".
    for i in range(40):
        admit(store, OTHER, f"mem_noise_{i:02d}", "alpha noise")
    with store.snapshot() as reader:
        assert reader.search(SCOPE, ["alpha", "beta"], NOW_MS, 100) == alone
        assert "mem_alpha" not in reader.search(OTHER, ["alpha"], NOW_MS, 100)
        assert reader.record(OTHER, "mem_alpha") is None
        assert reader.search(SCOPE, ["absent"], NOW_MS, 100) == []
        assert reader.search(Scope("tenant-c", "none"), ["alpha"], NOW_MS, 100) == []


def test_search_caps_and_breaks_ties_by_record_id(site: StoreSite) -> None:
    store = site.open()
    for rid in ("mem_c", "mem_a", "mem_b"):
        admit(store, SCOPE, rid, "same words")
    with store.snapshot() as reader:
        assert reader.search(SCOPE, ["same"], NOW_MS, 100) == ["mem_a", "mem_b", "mem_c"]
        assert reader.search(SCOPE, ["same"], NOW_MS, 2) == ["mem_a", "mem_b"]


def test_forget_removes_the_text_from_reads_and_search_and_keeps_a_tombstone(site: StoreSite) -> None:
    store = site.open()
    admit(store, SCOPE, "mem_gone", "forgettable words")
    store.transaction(lambda tx: tx.forget(SCOPE, "mem_gone", "hmac-sha256:keyed"))
    with store.snapshot() as reader:
        gone = reader.record(SCOPE, "mem_gone")
        assert gone is not None and gone.state == "tombstoned" and gone.body is None
        assert gone.payload_digest == "hmac-sha256:keyed"
        assert reader.search(SCOPE, ["forgettable"], NOW_MS, 100) == []
        assert reader.is_tombstoned(SCOPE, "hmac-sha256:keyed")
        assert not reader.is_tombstoned(OTHER, "hmac-sha256:keyed")


# -- through the engine: the audit row commits with its mutation -------------------------------------------------------


def test_a_mutation_commits_its_audit_row_or_neither(site: StoreSite) -> None:
    store = site.open()
    policy = ScopePolicy(AcceptAll(), False, timedelta(days=30), frozenset(), False, False, timedelta(seconds=300))
    engine = Engine(store, AesGcmCipher(os.urandom(32)), lambda scope: policy, os.urandom(32))
    journal = AuditJournal(store)
    caller = Binding("tenant-a", "workspace-1", "agent-1", "agent-1", "purpose:test", "s", "host", "aud", 0, 0,
                     token_id="tok-1", audit_id="audit_1")
    arguments = {
        "idempotency_key": "key-1",
        "payload": {"purpose_ref": "purpose:test", "primary_component_id": "c1", "valid_time": {"t": 0},
                    "components": [{"component_id": "c1", "kind": "decision", "text": "one decision"}],
                    "citations": [{"source_ref": "doc:1"}]},
        "evidence": {"kind": "observed"},
    }
    now = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)

    def failing(tx: StoreTransaction) -> None:
        journal.append_in(tx, "audit_1", caller, "engram_memory_capture", "ok")
        raise RuntimeError("the audit write fails after its row")

    with pytest.raises(RuntimeError):
        engine.call("engram_memory_capture", caller, arguments, now, failing)
    with store.snapshot() as reader:
        assert reader.reservation(SCOPE, "agent-1", "key-1") is None  # the capture rolled back with it
        assert reader.audit_count(MAIN) == 0
    outcome = engine.call("engram_memory_capture", caller, arguments, now,
                          lambda tx: journal.append_in(tx, "audit_1", caller, "engram_memory_capture", "ok"))
    assert outcome.code is None, outcome
    with store.snapshot() as reader:
        assert reader.reservation(SCOPE, "agent-1", "key-1") is not None
        rows = list(reader.audit_rows())
        assert [(row.chain, row.entry["audit_id"]) for row in rows] == [(MAIN, "audit_1")]
    assert journal.verify() == []


# -- quota holdings: counters the store keeps in step with every write -------------------------------------------


class RejectsMarked:
    """Accepts a capture unless its text says ``reject``, so a run sees both outcomes."""

    policy_id = "test/rejects-marked"
    policy_version = "1"

    def decide(self, candidate: CandidateView) -> AdmissionDecision:
        texts = " ".join(c["text"] for c in candidate.payload["components"])
        return AdmissionDecision("reject" if "reject" in texts else "accept", self.policy_id, self.policy_version)


HOLDERS = [("tenant-a", "workspace-1"), ("tenant-a", "workspace-2"), ("tenant-b", "workspace-1")]
PRINCIPALS = ("agent-1", "agent-2")


def assert_holdings_counted(store: MemoryStore) -> list[Holdings]:
    """Every holder's counters equal their recount; the counters, tenants first."""
    counted = []
    with store.snapshot() as reader:
        for tenant in sorted({tenant for tenant, _ in HOLDERS}):
            for principal in (None, *PRINCIPALS):
                held = reader.holdings(tenant, principal)
                assert held == reader.recount_holdings(tenant, principal), (tenant, principal)
                counted.append(held)
    return counted


class HoldingsRun:
    """Engine operations picked at random (seeded) over two tenants, one with two workspaces, and two principals."""

    def __init__(self, store: MemoryStore, seed: int) -> None:
        policy = ScopePolicy(RejectsMarked(), False, timedelta(days=30), frozenset(), False, False,
                             timedelta(seconds=300))
        limits = ResourceLimits(expiry=Expiry(pending_candidate_seconds=1800))
        self.engine = Engine(store, AesGcmCipher(os.urandom(32)), lambda scope: policy, os.urandom(32), limits=limits)
        self.rng = random.Random(seed)
        self.now = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
        self.pending: list[tuple[Binding, str]] = []
        self.admitted: list[tuple[Binding, str]] = []
        self.step = 0

    def caller(self, scope: tuple[str, str] | None = None) -> Binding:
        """A caller in ``scope`` (else a random one); any principal of a scope may decide on its candidates."""
        tenant, workspace = scope or self.rng.choice(HOLDERS)
        principal = self.rng.choice(PRINCIPALS)
        return Binding(tenant, workspace, principal, principal, "s", "purpose:test", "host", "aud", 0, 0,
                       token_id=f"tok-{self.step}", audit_id=f"audit_{self.step}")

    def call(self, tool: str, who: Binding, arguments: dict[str, Any]) -> Any:
        return self.engine.call(tool, who, {"idempotency_key": f"key-{self.step}", **arguments}, self.now)

    def next(self) -> str:
        """One operation; what it did."""
        self.step += 1
        self.now += timedelta(seconds=self.rng.choice((1, 5, 30, 120)))
        roll = self.rng.random()
        if roll < 0.4 or not (self.pending or self.admitted):
            return self.capture()
        if roll < 0.75 and self.pending:
            return self.admit()
        if roll < 0.83 and self.pending:
            who, cid = self.pending.pop(self.rng.randrange(len(self.pending)))
            outcome = self.call("engram_memory_withdraw", self.caller((who.tenant, who.workspace)),
                                {"candidate_id": cid, "reason_ref": "reason:test"})
            return "withdraw" if outcome.code is None else "expired"  # NOT_FOUND: the sweep shredded it first
        if roll < 0.96 and self.admitted:
            who, rid = self.admitted.pop(self.rng.randrange(len(self.admitted)))
            outcome = self.call("engram_memory_forget", self.caller((who.tenant, who.workspace)),
                                {"record_id": rid, "reason_ref": "reason:test"})
            assert outcome.code is None, outcome
            return "forget"
        self.now += timedelta(seconds=1800)  # past the pending lifetime: the sweep shreds what is due
        self.engine.expire_pending(self.now)
        return "expired"

    def capture(self) -> str:
        who = self.caller()
        words = " ".join(self.rng.choice(("alpha", "beta", "gamma", "delta")) for _ in range(self.rng.randint(1, 30)))
        words += " reject" if self.rng.random() < 0.25 else ""
        outcome = self.call("engram_memory_capture", who, {
            "payload": {"purpose_ref": "purpose:test", "primary_component_id": "c1", "valid_time": {"t": 0},
                        "components": [{"component_id": "c1", "kind": "decision", "text": words}],
                        "citations": [{"source_ref": "doc:1"}]},
            "evidence": {"kind": "observed"},
        })
        assert outcome.code is None, outcome
        self.pending.append((who, outcome.value["candidate_id"]))
        return "capture"

    def admit(self) -> str:
        who, cid = self.pending.pop(self.rng.randrange(len(self.pending)))
        outcome = self.call("engram_memory_request_admission", self.caller((who.tenant, who.workspace)),
                            {"candidate_id": cid})
        if outcome.code is not None:
            return "expired"  # NOT_FOUND: past its lifetime, so the sweep shreds it
        if outcome.value["outcome"]["status"] == "accepted":
            self.admitted.append((who, outcome.value["outcome"]["record_id"]))
        return str(outcome.value["outcome"]["status"])


def test_holdings_counters_follow_every_engine_operation(site: StoreSite) -> None:
    """A seeded random run of captures, admissions (accepted and rejected), withdrawals, forgets and expiries:
    after every step, the counters a capture reads equal the holdings summed afresh over candidates and records."""
    store = site.open()
    run = HoldingsRun(store, seed=12)
    seen: dict[str, int] = {}
    most = Holdings(0, 0)
    for _ in range(160):
        did = run.next()
        seen[did] = seen.get(did, 0) + 1
        counted = assert_holdings_counted(store)
        most = Holdings(max(most.pending, *(h.pending for h in counted)), max(most.bytes, *(h.bytes for h in counted)))
    assert {"capture", "accepted", "rejected", "withdraw", "forget", "expired"} <= set(seen), seen
    assert most.pending > 1 and most.bytes > 0, most  # the counters did move


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
        raw = tx.sql if isinstance(tx, SqliteTransaction) else tx.conn  # type: ignore[attr-defined]
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
