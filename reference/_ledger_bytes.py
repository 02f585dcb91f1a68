"""Ledger bytes: what a holder's mutations leave in the store for good, counted so that a quota can bound it.

A capture that admission rejects, or that is withdrawn, erases its sealed body,
but its lifecycle records stay: the idempotency reservations that answer its
replays, its journal events and its calls' audit rows (ids, states and
digests, never content, so no erasure removes them), a few kilobytes a cycle
that the byte quota, which counts sealed bodies, never saw. Each mutation's
unit of work now measures what it writes of these (``Metered``) and adds it to
one counter row per tenant and per principal in the store, in the same unit of
work, so every process on the store counts into the same rows; a mutation that
would pass ``[quotas] ledger_bytes`` is refused RATE_LIMITED and writes nothing.
"""

from __future__ import annotations

import json
from typing import Any, cast

from engram_mcp.reference._ports import AuditRow, JournalEntry, Reservation, Scope, StoreTransaction

# The counter rows (both stores): one per (tenant, holder, principal) as holder_key names them.
TABLE = """
CREATE TABLE IF NOT EXISTS ledger_bytes (
    tenant TEXT NOT NULL,
    holder TEXT NOT NULL CHECK (holder IN ('tenant', 'principal')),
    principal TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    PRIMARY KEY (tenant, holder, principal)
)
"""


def add_sql(placeholder: str) -> str:
    """Add bytes to both of a call's holders in one statement, with the driver's parameter placeholder
    (tenant, principal, bytes)."""
    p = placeholder
    return (
        f"INSERT INTO ledger_bytes AS l (tenant, holder, principal, bytes) "
        f"SELECT {p}, h.holder, CASE h.holder WHEN 'tenant' THEN '' ELSE {p} END, {p} "
        "FROM (SELECT 'tenant' AS holder UNION ALL SELECT 'principal') AS h WHERE true "
        "ON CONFLICT (tenant, holder, principal) DO UPDATE SET bytes = l.bytes + excluded.bytes"
    )


def read_sql(placeholder: str) -> str:
    p = placeholder
    return f"SELECT bytes FROM ledger_bytes WHERE tenant = {p} AND holder = {p} AND principal = {p}"


def _size(value: Any) -> int:
    return len(json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8"))


class Metered:
    """A unit of work that counts the bytes it writes of lifecycle records: reservations, journal events and
    audit rows (their stored JSON, hashes and keys). Everything else passes through untouched."""

    def __init__(self, tx: StoreTransaction) -> None:
        self._tx = tx
        self.written = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tx, name)

    def reserve(self, scope: Scope, principal: str, key: str, reservation: Reservation) -> None:
        self.written += len(key.encode()) + len(reservation.intent) + _size(reservation.value)
        self._tx.reserve(scope, principal, key, reservation)

    def update_reservation(self, scope: Scope, principal: str, key: str, value: dict[str, Any]) -> None:
        self._tx.update_reservation(scope, principal, key, value)  # rewritten in place, as large as it was

    def journal_append(self, entry: JournalEntry) -> None:
        self.written += _size(entry.event) + len(entry.event_hash) + len(entry.previous_hash)
        self._tx.journal_append(entry)

    def audit_append(self, row: AuditRow) -> int:
        self.written += _size(row.entry) + len(row.entry_hash) + len(row.previous_hash)
        return self._tx.audit_append(row)

    @property
    def tx(self) -> StoreTransaction:
        """This, as the unit of work it stands for."""
        return cast(StoreTransaction, self)
