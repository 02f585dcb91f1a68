"""Counters that replicas share through the store: the call window and the refused audit chain's length.

Two handles on one store (two SQLite connections to one file, or two
PostgreSQL pools on one schema) stand for two server processes. Together they
admit no more calls in a window than the quota allows, raced or not, and the
check is shown failing against counters kept per process. The refused audit
chain stays at its bound whichever handle appends, and still verifies.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from engram_mcp.reference._audit import REFUSED, AuditJournal
from engram_mcp.reference._ports import MemoryStore
from engram_mcp.reference._quotas import CallWindow, Quota, Quotas
from tests.postgres_support import fresh_postgres_url, postgres_url
from tests.reference.test_quotas import caller
from tests.reference.test_store_contract import StoreSite, site

__all__ = ["fresh_postgres_url", "postgres_url", "site"]  # the fixtures, imported for pytest to find

TENANT_CALLS, PRINCIPAL_CALLS = 7, 4
QUOTAS = Quotas(window_seconds=60, tenant=Quota(0, 0, TENANT_CALLS), principal=Quota(0, 0, PRINCIPAL_CALLS))
START = 1_800_000_000.0  # the start of a window (a multiple of 60)
RACERS_PER_WINDOW = 4


@dataclass
class ProcessLocalCounts:
    """A broken variant: each handle counts the calls it serves in its own memory, as one process would."""

    counts: dict[tuple[str, ...], tuple[int, int]] = field(default_factory=dict)

    def count_call(self, tenant: str, principal: str, window: int, bounds: tuple[int, int]) -> bool:
        holders = ((tenant,), (tenant, principal))
        current = [self.counts.get(h, (window, 0)) for h in holders]
        current = [(window, 0) if w < window else (w, n) for w, n in current]
        if any(0 < bound <= n for (_, n), bound in zip(current, bounds, strict=True)):
            return False
        for holder, (w, n) in zip(holders, current, strict=True):
            self.counts[holder] = (w, n + 1)
        return True


def assert_budget_shared(windows: Sequence[CallWindow]) -> None:
    """Calls spread over the handles get the quota's budget once in all, and a new window gets it afresh."""
    served = [windows[i % len(windows)].admit("t", "a", START + i / 100) for i in range(3 * PRINCIPAL_CALLS)]
    assert served.count(True) == PRINCIPAL_CALLS, "the principal's calls over all handles"
    others = [windows[i % len(windows)].admit("t", "b", START + 1) for i in range(3 * TENANT_CALLS)]
    assert others.count(True) == TENANT_CALLS - PRINCIPAL_CALLS, "the tenant's calls over all its principals"
    assert windows[0].admit("u", "a", START + 2), "another tenant has its own budget"
    assert windows[1].admit("t", "a", START + 60), "the next window starts afresh"


def test_handles_on_one_store_share_the_call_budget(site: StoreSite) -> None:
    assert_budget_shared([CallWindow(QUOTAS, site.open()), CallWindow(QUOTAS, site.open())])


def test_the_shared_budget_check_catches_counts_kept_per_process() -> None:
    stores = [ProcessLocalCounts(), ProcessLocalCounts()]
    with pytest.raises(AssertionError):
        assert_budget_shared([CallWindow(QUOTAS, store)  # type: ignore[arg-type]  # count_call is all it uses
                              for store in stores])


def test_calls_raced_from_two_handles_are_admitted_up_to_the_bound_exactly(site: StoreSite) -> None:
    windows = [CallWindow(QUOTAS, site.open()) for _ in range(2)]
    racers = [window for window in windows for _ in range(RACERS_PER_WINDOW)]
    barrier = threading.Barrier(len(racers))
    admitted: list[bool] = []
    lock = threading.Lock()

    def run(window: CallWindow, principal: str) -> None:
        barrier.wait()
        for _ in range(3):
            verdict = window.admit("t", principal, START + 5)
            with lock:
                admitted.append(verdict)

    threads = [threading.Thread(target=run, args=(window, f"p{i % 3}")) for i, window in enumerate(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted) == 3 * len(racers)
    assert admitted.count(True) == TENANT_CALLS, "no more, and no fewer, than the tenant's budget"


def test_a_lagging_clock_counts_into_the_current_window(site: StoreSite) -> None:
    ahead, behind = CallWindow(QUOTAS, site.open()), CallWindow(QUOTAS, site.open())
    assert all(ahead.admit("t", "a", START + 60) for _ in range(PRINCIPAL_CALLS))
    assert not behind.admit("t", "a", START + 59), "an earlier window does not restart the count"


def test_the_refused_chain_keeps_its_bound_whichever_handle_appends(site: StoreSite) -> None:
    stores: list[MemoryStore] = [site.open(), site.open()]
    journals = [AuditJournal(store, refused_rows=10) for store in stores]
    for i in range(120):
        outcome = "ok" if i % 15 == 0 else "NOT_FOUND"
        journals[i % 2].append(f"audit_{i:032x}", caller(), "engram_memory_get", outcome)
        with stores[0].snapshot() as reader:
            held = reader.audit_count(REFUSED)
            assert held == sum(1 for row in reader.audit_rows() if row.chain == REFUSED)
        assert held <= 10 + 1, f"after append {i}: the bound plus one batch of slack, not one per handle"
    assert held >= 10, "compaction keeps the bound's rows"
    with stores[1].snapshot() as reader:
        checkpoint = reader.audit_checkpoints()[REFUSED]
    assert checkpoint.rows_compacted == 120 - 8 - held  # 8 of the 120 calls were answered
    assert journals[0].verify() == [] and journals[1].verify() == []
