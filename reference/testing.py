"""The MemoryStore port's promises, as tests any store implementation can run.

Each test takes a ``site`` fixture: a ``StoreSite`` that opens one or more handles on one fresh, empty store
(two handles stand for two server processes sharing it). Races line threads up on a barrier across both
handles, so a store that checked and wrote in separate steps would show two effects. To certify a store of
your own, import the tests into a pytest module and give them the fixture::

    import pytest
    from contextlib import ExitStack
    from engram_mcp.reference.testing import *  # noqa: F403 - the tests, collected where they are imported
    from engram_mcp.reference.testing import StoreSite

    @pytest.fixture
    def site(tmp_path):
        with ExitStack() as handles:
            yield StoreSite(lambda: MyStore(tmp_path / "store"), handles)

The reference's SQLite and PostgreSQL stores run them in tests/reference/test_store_contract.py.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from engram_mcp.contract import ZERO_DIGEST
from engram_mcp.contract.binding import Binding
from engram_mcp.reference._audit import MAIN, AuditJournal
from engram_mcp.reference._core import Engine
from engram_mcp.reference._crypto import AesGcmCipher
from engram_mcp.reference._journal import append_event, journal_problems
from engram_mcp.reference._policy import AcceptAll, ScopePolicy
from engram_mcp.reference._ports import (
    AdmissionDecision,
    CandidateView,
    Holdings,
    MemoryStore,
    Reservation,
    Scope,
    StoreTransaction,
)
from engram_mcp.reference._quotas import Expiry, ResourceLimits

__all__ = [
    "NOW_MS",
    "OTHER",
    "SCOPE",
    "StoreSite",
    "admit",
    "assert_consumed_once",
    "assert_gapless_journal",
    "assert_holdings_counted",
    "assert_reserved_once",
    "race",
    "record",
    "test_a_confirmation_id_is_consumed_once_under_a_race",
    "test_a_failed_unit_of_work_leaves_nothing",
    "test_a_key_raced_from_two_handles_is_reserved_exactly_once",
    "test_a_mutation_commits_its_audit_row_or_neither",
    "test_erasures_queue_in_order_and_complete_only_when_marked",
    "test_forget_removes_the_text_from_reads_and_search_and_keeps_a_tombstone",
    "test_holdings_counters_follow_every_engine_operation",
    "test_journal_appends_raced_from_two_handles_stay_one_gapless_chain",
    "test_keys_are_per_principal_and_per_scope",
    "test_purged_confirmation_ids_are_only_the_old_ones",
    "test_raced_units_of_work_commit_or_fail_each_alone",
    "test_search_caps_and_breaks_ties_by_record_id",
    "test_search_sees_only_its_scope_and_no_other_scope_moves_its_order",
]

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


def test_raced_units_of_work_commit_or_fail_each_alone(site: StoreSite) -> None:
    """Many writers at once, every other one failing after it wrote: a store may run them together (one commit
    for several), but each failing unit leaves nothing and each other one is whole, under its own key."""
    stores = [site.open(), site.open()]
    writers = 12
    barrier = threading.Barrier(writers)
    cursors: dict[int, int] = {}
    refusals: dict[int, str] = {}

    def writer(n: int) -> None:
        def unit(tx: StoreTransaction) -> int:
            cursor, _ = append_event(tx, SCOPE, {"operation": "capture", "n": n})
            tx.reserve(SCOPE, "agent-1", f"key-{n}", Reservation(f"intent-{n}", {"n": n}))
            if n % 2:
                raise RuntimeError(f"writer {n} refused after writing")
            return cursor

        barrier.wait()
        try:
            cursors[n] = stores[n % 2].transaction(unit)
        except RuntimeError as problem:
            refusals[n] = str(problem)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    failing = range(1, writers, 2)
    assert refusals == {n: f"writer {n} refused after writing" for n in failing}
    assert sorted(cursors.values()) == list(range(1, writers // 2 + 1)) and len(cursors) == writers // 2
    with stores[1].snapshot() as reader:
        assert [entry.event["n"] for entry in reader.journal()] == sorted(cursors, key=cursors.__getitem__)
        assert journal_problems(reader) == []
        for n in range(writers):
            expected = Reservation(f"intent-{n}", {"n": n}) if n in cursors else None
            assert reader.reservation(SCOPE, "agent-1", f"key-{n}") == expected


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


class _AuditOnly:
    """A call's hooks that only write its audit row (the engine's UnitHooks)."""

    def __init__(self, write: Callable[[StoreTransaction], None]) -> None:
        self.write_audit = write

    def last_word(self) -> None:
        pass


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
        engine.call("engram_memory_capture", caller, arguments, now, _AuditOnly(failing))
    with store.snapshot() as reader:
        assert reader.reservation(SCOPE, "agent-1", "key-1") is None  # the capture rolled back with it
        assert reader.audit_count(MAIN) == 0
    outcome = engine.call("engram_memory_capture", caller, arguments, now, _AuditOnly(
        lambda tx: journal.append_in(tx, "audit_1", caller, "engram_memory_capture", "ok")))
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


