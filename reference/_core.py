"""The six operations, free of MCP: arguments in, an Outcome out.

The MCP edge has already checked the host binding, the grants, the purpose
and the arguments (schemas plus shared rules), and passed any confirmation
gate. What is left is the contract's lifecycle (reference/_lifecycle.py),
recall (reference/_recall.py) and receipts (reference/_journal.py), against
the store port. This module wires them and dispatches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from engram_mcp.contract import load
from engram_mcp.contract.binding import Binding
from engram_mcp.contract.validation import instant
from engram_mcp.reference import _search as search_index
from engram_mcp.reference._call import UnitHooks
from engram_mcp.reference._crypto import DigestKeyer, derive_key
from engram_mcp.reference._envelope import Outcome, Refusal
from engram_mcp.reference._journal import scope_of
from engram_mcp.reference._lifecycle import Lifecycle, purge_horizon
from engram_mcp.reference._periodic import Periodic
from engram_mcp.reference._policy import ScopePolicy
from engram_mcp.reference._ports import Cipher, KeysLegacyDigests, MemoryStore, Scope, StoreTransaction
from engram_mcp.reference._quotas import CallWindow, ResourceLimits
from engram_mcp.reference._recall import Recall, epoch_ms

__all__ = ["Engine", "ScopePolicy", "epoch_ms", "scope_of"]

log = logging.getLogger("engram_mcp.reference")


class Engine:
    def __init__(
        self,
        store: MemoryStore,
        cipher: Cipher,
        policies: Callable[[Scope], ScopePolicy],
        cursor_key: bytes,
        digest_key: bytes | None = None,
        limits: ResourceLimits | None = None,
        *,
        recall: type[Recall] = Recall,
        lifecycle: type[Lifecycle] = Lifecycle,
        cursors: type[search_index.CursorSealer] = search_index.CursorSealer,
    ) -> None:
        """``recall``, ``lifecycle`` and ``cursors`` are the classes of the engine's parts (a subclass of one
        changes one behaviour)."""
        self.store = store
        self.limits = limits or ResourceLimits()
        self.calls = CallWindow(self.limits.quotas, store)
        self._housekeeping = Periodic(lambda: self.housekeeping(datetime.now(UTC)), name="housekeeping")
        self.cipher = cipher
        # Stored payload digests are keyed (see DigestKeyer); the server passes a subkey of the KEK.
        self.digests = DigestKeyer(digest_key or derive_key(cursor_key, "stored-digest"))
        if isinstance(store, KeysLegacyDigests):  # a store that can predate keyed digests keys them once
            store.key_legacy_digests(self.digests.stored)
        self.contract = load()
        self.recall = recall(store, cursors(cursor_key))
        self.lifecycle = lifecycle(store, cipher, policies, self.digests, self.limits,
                                   self.recall.readable_at_largest_budget)
        self._reads: dict[str, Callable[[Binding, dict[str, Any], datetime], dict[str, Any]]] = {
            "engram_memory_search": self.recall.search,
            "engram_memory_get": self.recall.get,
        }
        self._mutations: dict[str, Callable[[Binding, dict[str, Any], datetime, UnitHooks | None], dict[str, Any]]] = {
            "engram_memory_capture": self.lifecycle.capture,
            "engram_memory_request_admission": self.lifecycle.request_admission,
            "engram_memory_withdraw": self.lifecycle.withdraw,
            "engram_memory_forget": self.lifecycle.forget,
        }

    def call(
        self, tool: str, caller: Binding, arguments: dict[str, Any], now: datetime, hooks: UnitHooks | None = None
    ) -> Outcome:
        """Run one operation. ``hooks`` is the call being served: a mutation that succeeds writes its audit row
        inside its own unit of work (a refusal rolls it back with everything else, so the edge audits that
        itself), after asking its last word once the store's lock is held; a read leaves both to the edge."""
        try:
            if tool in self._reads:
                return Outcome(value=self._reads[tool](caller, arguments, now))
            self._sweep(now)  # a unit of its own, before the caller's: the hooks judge the caller's unit alone
            return Outcome(value=self._mutations[tool](caller, arguments, now, hooks))
        except Refusal as refusal:
            return Outcome(code=refusal.code)

    def start_housekeeping(self, interval: float | None = None) -> None:
        """Sweep expired pending candidates periodically (each minute at most), so an idle server shreds them too."""
        self._housekeeping.start(interval or min(60.0, float(self.limits.expiry.pending_candidate_seconds)))

    def stop_housekeeping(self) -> None:
        self._housekeeping.stop()

    def housekeeping(self, now: datetime) -> None:
        """What an idle server still owes: shred expired pending candidates, forget unreplayable states."""
        self.expire_pending(now)
        self.store.transaction(lambda tx: tx.purge_confirmations(purge_horizon(now)))

    def expire_pending(self, now: datetime, *, even_if_quiet: bool = True) -> int:
        return self.lifecycle.expire_pending(now, even_if_quiet=even_if_quiet)

    def _sweep(self, now: datetime) -> None:
        """Expire what is due before a mutation; a failed sweep is left to the next one, never the caller's failure."""
        try:
            self.expire_pending(now, even_if_quiet=False)
        except Exception:
            log.exception("expired pending candidates could not be swept")

    def admit_call(self, caller: Binding, now: datetime) -> bool:
        """Count one tool call against the call quotas; False (RATE_LIMITED, nothing counted) when over one."""
        return self.calls.admit(caller.tenant, caller.principal, now.timestamp())

    def replay(self, tool: str, caller: Binding, arguments: dict[str, Any]) -> Outcome | None:
        """A completed mutation's replay, or its conflict, before any gate is asked again."""
        with self.store.snapshot() as reader:
            try:
                value = self.lifecycle.replay_of(reader, tool, caller, arguments)
            except Refusal as refusal:
                return Outcome(code=refusal.code)
        return Outcome(value=value) if value is not None else None

    def consume_state(self, nonce: str, now: datetime | None = None) -> bool:
        """Burn a confirmation state's nonce, or a host reference's id; False when it was already used.

        A state is refused as expired once its lifetime, at most confirmation.ttl.max
        from its minting, has passed, and it was minted before it was consumed: so a
        nonce consumed longer ago than that (plus the clock skew allowed) can no longer
        be replayed, and its row is deleted.
        """
        moment = now or datetime.now(UTC)

        def burn(tx: StoreTransaction) -> bool:
            tx.purge_confirmations(purge_horizon(moment))
            return tx.consume_confirmation(nonce, instant(moment))

        return self.store.transaction(burn)
