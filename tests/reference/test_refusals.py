"""Cheap refusals stay cheap: a refused call counts toward the call quota, and a flood of refusals is journaled
in batches instead of taking the store's writers' lock once per call."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from engram_mcp.reference._audit import AuditJournal, verify_in
from engram_mcp.reference._core import Engine
from engram_mcp.reference._crypto import AesGcmCipher
from engram_mcp.reference._group_commit import GroupCommit
from engram_mcp.reference._policy import AcceptAll, RejectAll
from engram_mcp.reference._ports import MemoryStore, StoreTransaction
from engram_mcp.reference._quotas import Quota
from engram_mcp.reference._store import SqliteStore
from tests.postgres_support import fresh_postgres_url
from tests.reference.conftest import (
    admission_args,
    capture_args,
    init_reference_dir,
    search_args,
    stdio_client_for,
    withdraw_args,
)
from tests.reference.test_core_units import NOW, binding, policy
from tests.reference.test_quotas import configure, limits
from tests.reference.test_store_contract import StoreSite, site

__all__ = ["fresh_postgres_url", "site"]  # the fixtures, imported for pytest to find

T = TypeVar("T")


@pytest.mark.anyio
@pytest.mark.parametrize("refusal", ["unknown-tool", "missing-audit-id"])
async def test_refused_calls_count_toward_the_call_quota(tmp_path: Path, refusal: str) -> None:
    ref = init_reference_dir(tmp_path / "engram")
    configure(ref, quotas__principal__calls_per_window="5", quotas__window_seconds="3600")
    async with stdio_client_for(ref, "legacy") as client:
        for _ in range(5):
            if refusal == "unknown-tool":
                await client.protocol_error("engram_memory_unknown", {}, client.host.meta())
            else:
                await client.protocol_error("engram_memory_search", search_args("x"), client.host.meta(audit_id=None))
        counted = await client.call("engram_memory_search", search_args("quota"))
        other = await client.call("engram_memory_search", search_args("quota"), principal="agent-limited")
    assert counted.code == "RATE_LIMITED", "the refused calls were not counted"
    assert other.ok


class CountingStore(SqliteStore):
    """The store, counting its units of work, each of which takes the writers' lock."""

    units = 0

    def transaction(self, work: Callable[[StoreTransaction], T]) -> T:
        self.units += 1
        time.sleep(0.01)  # a busy store: others queue meanwhile
        return super().transaction(work)


def test_a_flood_of_refusals_is_journaled_in_batches_that_still_verify(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "engram.sqlite3", erasure_retry_interval=3600)
    journal = AuditJournal(store, refused_rows=1000)
    callers = 40
    start = threading.Barrier(callers)

    def refuse(i: int) -> None:
        start.wait()
        journal.append(f"audit-{i}", binding(), "unknown", "-32602")

    threads = [threading.Thread(target=refuse, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    try:
        with store.snapshot() as reader:
            rows = list(reader.audit_rows())
            assert verify_in(reader) == []
        assert sorted(row.entry["audit_id"] for row in rows) == sorted(f"audit-{i}" for i in range(callers))
        assert store.units < callers / 4, f"{store.units} units of work for {callers} refusals"
    finally:
        store.close()


def test_a_failed_batch_fails_each_of_its_callers_and_the_next_batch_goes_on() -> None:
    written: list[Sequence[int]] = []
    release = threading.Event()

    def write(items: Sequence[int]) -> None:
        if not written:
            written.append(items)
            release.wait(10)  # the first batch, alone, while the others queue behind it
            return
        written.append(items)
        if 13 in items:
            raise RuntimeError("store unavailable")

    batched: GroupCommit[int] = GroupCommit(write)
    outcomes: dict[int, str] = {}
    first = threading.Thread(target=lambda: batched.commit(0))
    first.start()
    while not written:
        time.sleep(0.001)

    def commit(item: int) -> None:
        try:
            batched.commit(item)
            outcomes[item] = "ok"
        except RuntimeError:
            outcomes[item] = "failed"

    queued = [threading.Thread(target=commit, args=(i,)) for i in range(1, 20)]
    for thread in queued:
        thread.start()
    time.sleep(0.2)
    release.set()
    for thread in [first, *queued]:
        thread.join(10)
    assert len(written) <= 3, written  # the lone first one, then the queue in one or two batches
    failed = {i for i, outcome in outcomes.items() if outcome == "failed"}
    batch_of_13 = next(set(items) for items in written if 13 in items)
    assert failed == batch_of_13
    assert set(outcomes) == set(range(1, 20))


def test_a_lone_row_is_committed_at_once() -> None:
    written: list[Any] = []
    GroupCommit(written.append).commit("row")
    assert written == [["row"]]


# -- what a rejected or withdrawn capture leaves for good ------------------------------------------------


CYCLES = 40
LEDGER_BOUND = 40_000  # bytes: a capture and its rejection or withdrawal leave a few kilobytes


def lasting_bytes(store: MemoryStore) -> int:
    """Bytes of reservations, journal events and audit rows in the store, as the tables hold them."""
    with store.snapshot() as reader:
        journal = sum(len(json.dumps(e.event)) for e in reader.journal())
        audit = sum(len(json.dumps(r.entry)) for r in reader.audit_rows())
    return journal + audit


@pytest.mark.parametrize("ending", ["rejected", "withdrawn"])
def test_what_rejected_and_withdrawn_captures_leave_is_held_to_a_quota(
    site: StoreSite, ending: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = site.open()
    bound = Quota(pending_candidates=0, bytes=0, calls_per_window=0, ledger_bytes=LEDGER_BOUND)
    admission = RejectAll() if ending == "rejected" else AcceptAll()
    engine = Engine(store, AesGcmCipher(os.urandom(32)), lambda scope: policy(admission), os.urandom(32),
                    limits=limits(principal=bound))
    codes = []
    for _ in range(CYCLES):
        outcome = engine.call("engram_memory_capture", binding(), capture_args(), NOW)
        if outcome.code is None:
            cid = outcome.value["candidate_id"]
            tool, arguments = ("engram_memory_request_admission", admission_args(cid)) if ending == "rejected" else (
                "engram_memory_withdraw", withdraw_args(cid))
            outcome = engine.call(tool, binding(), arguments, NOW)
        codes.append(outcome.code or "ok")
    assert "RATE_LIMITED" in codes, f"{CYCLES} cycles left {lasting_bytes(store)} bytes that no quota counted"
    assert codes.index("RATE_LIMITED") < CYCLES // 2
    with store.snapshot() as reader:
        counted = reader.ledger_bytes("tenant-a", "agent-1")
    assert counted <= LEDGER_BOUND and counted >= lasting_bytes(store) // 2
    cycles = codes.index("RATE_LIMITED")
    with capsys.disabled():
        print(f"\ncapture + {ending}: {counted / cycles:,.0f} ledger bytes a cycle; RATE_LIMITED after {cycles} "
              f"cycles at ledger_bytes {LEDGER_BOUND:,}")
    other = engine.call("engram_memory_capture", binding(principal="agent-2"), capture_args(), NOW)
    assert other.ok, "another principal's bound is its own"
