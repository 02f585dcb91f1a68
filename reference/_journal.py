"""Receipts and the lifecycle journal: hash-chained events, authorization and transaction digests, and the
idempotency reservations that make a mutation's answer replayable.

All of it is pure computation over a ``StoreTransaction``/``StoreReader``: the
chain is built here, once, whatever store keeps it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engram_mcp.contract import ZERO_DIGEST, profile_digest, receipt_digest
from engram_mcp.contract.binding import Binding, idempotency_intent, operation_target
from engram_mcp.contract.validation import instant
from engram_mcp.reference._envelope import Refusal
from engram_mcp.reference._ports import JournalEntry, Reservation, Scope, StoreReader, StoreTransaction


def scope_of(binding: Binding) -> Scope:
    return Scope(binding.tenant, binding.workspace)


def append_event(tx: StoreTransaction, scope: Scope, event: dict[str, Any]) -> tuple[int, str]:
    """Append a lifecycle event (no content) to the hash-chained journal; returns (cursor, event_digest)."""
    last_cursor, previous = tx.journal_head()
    cursor = last_cursor + 1
    body = {**event, "cursor": str(cursor), "previous_event_hash": previous}
    event_hash = receipt_digest("memory-journal-event", body, "event_hash")
    tx.journal_append(JournalEntry(cursor, scope, body, event_hash, previous))
    return cursor, event_hash


def journal_problems(reader: StoreReader) -> list[str]:
    """Gaps and broken links of the journal chain, as constant descriptions; empty when it verifies."""
    problems: list[str] = []
    previous, expected_cursor = ZERO_DIGEST, 1
    for entry in reader.journal():
        if entry.cursor != expected_cursor:
            problems.append(f"journal cursor gap before {entry.cursor}")
        if entry.previous_hash != previous or entry.event.get("previous_event_hash") != previous:
            problems.append(f"journal chain broken at cursor {entry.cursor}")
        if receipt_digest("memory-journal-event", entry.event, "event_hash") != entry.event_hash:
            problems.append(f"journal event {entry.cursor} does not match its hash")
        previous, expected_cursor = entry.event_hash, entry.cursor + 1
    return problems


def authorization(caller: Binding, tool: str) -> str:
    return profile_digest(
        "authorization",
        {"tool": tool, "tenant": caller.tenant, "workspace": caller.workspace,
         "principal": caller.principal, "binding": caller.token_id},
    )


def transaction_receipt(operation: str, cursor: int, event_digest: str, now: datetime, **extra: Any) -> str:
    return receipt_digest(
        "canonical-transaction",
        {"operation": operation, "cursor": str(cursor), "event_digest": event_digest,
         "committed_at": instant(now), **extra},
    )


# -- idempotency ------------------------------------------------------------------------------------------


def intent(tool: str, arguments: dict[str, Any], caller: Binding) -> str:
    return idempotency_intent(tool, operation_target(tool, arguments), arguments, caller)


def as_replay(tool: str, value: dict[str, Any]) -> dict[str, Any]:
    """The stored value as a retry sees it: duplicate_exact for capture, replayed elsewhere."""
    if tool == "engram_memory_capture":
        return {**value, "status": "duplicate_exact"}
    return {**value, "replayed": True}


def reserved(reader: StoreReader, tool: str, caller: Binding, arguments: dict[str, Any]) -> dict[str, Any] | None:
    """The replay of the caller's key, None when it is free; DIGEST_CONFLICT when it was used for another intent."""
    found = reader.reservation(scope_of(caller), caller.principal, arguments["idempotency_key"])
    if found is None:
        return None
    if found.intent != intent(tool, arguments, caller):
        raise Refusal("DIGEST_CONFLICT")
    return as_replay(tool, found.value)


def reserve(tx: StoreTransaction, tool: str, caller: Binding, arguments: dict[str, Any], value: dict[str, Any]) -> None:
    tx.reserve(scope_of(caller), caller.principal, arguments["idempotency_key"],
               Reservation(intent(tool, arguments, caller), value))
