"""The append-only audit journal: each call's auditId, principal, tool and outcome, hash-chained.

It never holds content — no arguments, no text, no ids of records — so that
keeping it forever reveals nothing a forget was meant to remove.

Two hash chains share the table. ``main`` holds the calls answered (and every
row written before the chains were split); ``refused`` holds the calls refused,
which anyone can send at any rate. The refused chain is bounded: past
``refused_rows`` its oldest rows are compacted. Compaction deletes a prefix of
the chain and keeps a checkpoint, the seq and hash of the last row removed, so
the rows kept still verify from it; it also appends a compaction entry, with
that checkpoint, to the main chain, so the checkpoint cannot be moved without
breaking the main chain.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import UTC, datetime
from typing import Any

from engram_mcp.contract import ZERO_DIGEST, profile_digest
from engram_mcp.contract.binding import Binding
from engram_mcp.contract.validation import instant
from engram_mcp.reference._store import Store

MAIN, REFUSED = "main", "refused"
ANSWERED = frozenset({"ok", "input_required"})  # outcomes that go to the main chain
COMPACTION = "audit-compaction"


def chain_of(outcome: str) -> str:
    return MAIN if outcome in ANSWERED else REFUSED


def _hash(entry: dict[str, Any], previous: str) -> str:
    return profile_digest("audit-entry", {**entry, "previous_hash": previous})


class AuditJournal:
    def __init__(self, store: Store, *, refused_rows: int = 100_000) -> None:
        if refused_rows < 1:
            raise ValueError("refused_rows must be positive")
        self.store = store
        self.refused_rows = refused_rows
        # Compact a tenth past the bound at a time, so a flood of refusals costs one delete per batch.
        self._slack = max(1, refused_rows // 10)
        self._refused_count: int | None = None  # counted once, then kept in step (one server per store)
        self._count_lock = threading.Lock()

    def append(self, audit_id: str, binding: Binding, tool: str, outcome: str) -> None:
        entry = {
            "audit_id": audit_id,
            "at": instant(datetime.now(UTC)),
            "tenant": binding.tenant,
            "workspace": binding.workspace,
            "principal": binding.principal,
            "agent_id": binding.agent_id,
            "session": binding.session,
            "binding_id": binding.token_id,
            "tool": tool,
            "outcome": outcome,
        }
        chain = chain_of(outcome)
        with self.store.write() as db:
            self._link(db, chain, entry)
            if chain == REFUSED:
                with self._count_lock:
                    if self._refused_count is None:
                        self._refused_count = _count(db, REFUSED)
                    else:
                        self._refused_count += 1
                    if self._refused_count > self.refused_rows + self._slack:
                        self._refused_count -= self._compact(db, self._refused_count - self.refused_rows)

    @staticmethod
    def _link(db: sqlite3.Connection, chain: str, entry: dict[str, Any]) -> None:
        previous = _head(db, chain)
        db.execute(
            "INSERT INTO audit (entry, entry_hash, previous_hash, chain) VALUES (?, ?, ?, ?)",
            (json.dumps(entry, sort_keys=True), _hash(entry, previous), previous, chain),
        )

    def _compact(self, db: sqlite3.Connection, rows: int) -> int:
        """Remove the ``rows`` oldest refused rows behind a checkpoint; how many were removed."""
        last = db.execute(
            "SELECT seq, entry_hash FROM audit WHERE chain = ? ORDER BY seq LIMIT 1 OFFSET ?", (REFUSED, rows - 1)
        ).fetchone()
        if last is None:
            return 0
        removed = db.execute("DELETE FROM audit WHERE chain = ? AND seq <= ?", (REFUSED, last["seq"])).rowcount
        before = db.execute("SELECT rows_compacted FROM audit_checkpoints WHERE chain = ?", (REFUSED,)).fetchone()
        total = (before["rows_compacted"] if before else 0) + removed
        db.execute(
            "INSERT INTO audit_checkpoints VALUES (?, ?, ?, ?) ON CONFLICT (chain) DO UPDATE SET "
            "through_seq = excluded.through_seq, entry_hash = excluded.entry_hash, rows_compacted = "
            "excluded.rows_compacted",
            (REFUSED, last["seq"], last["entry_hash"], total),
        )
        self._link(db, MAIN, {"kind": COMPACTION, "at": instant(datetime.now(UTC)), "chain": REFUSED,
                              "through_seq": last["seq"], "through_hash": last["entry_hash"], "rows_compacted": total})
        return removed

    def verify(self) -> list[int]:
        """Sequence numbers whose entry breaks a chain; empty when the journal is intact."""
        with self.store.read() as db:
            return verify_in(db)


def _count(db: sqlite3.Connection, chain: str) -> int:
    return int(db.execute("SELECT COUNT(*) FROM audit WHERE chain = ?", (chain,)).fetchone()[0])


def _checkpoint(db: sqlite3.Connection, chain: str) -> sqlite3.Row | None:
    return db.execute("SELECT * FROM audit_checkpoints WHERE chain = ?", (chain,)).fetchone()


def _head(db: sqlite3.Connection, chain: str) -> str:
    last = db.execute("SELECT entry_hash FROM audit WHERE chain = ? ORDER BY seq DESC LIMIT 1", (chain,)).fetchone()
    if last is not None:
        return last["entry_hash"]
    checkpoint = _checkpoint(db, chain)
    return checkpoint["entry_hash"] if checkpoint is not None else ZERO_DIGEST


def verify_in(db: sqlite3.Connection) -> list[int]:
    """Each chain from its genesis or checkpoint; a checkpoint must be the one the main chain last recorded."""
    broken: list[int] = []
    checkpoints = {row["chain"]: row for row in db.execute("SELECT * FROM audit_checkpoints")}
    previous = {chain: (row["entry_hash"] if row else ZERO_DIGEST)
                for chain, row in ((MAIN, checkpoints.get(MAIN)), (REFUSED, checkpoints.get(REFUSED)))}
    recorded: dict[str, tuple[int, str, int]] = {}
    for row in db.execute("SELECT seq, entry, entry_hash, previous_hash, chain FROM audit ORDER BY seq"):
        chain, entry = row["chain"], json.loads(row["entry"])
        start = previous.get(chain, ZERO_DIGEST)
        if row["previous_hash"] != start or row["entry_hash"] != _hash(entry, start):
            broken.append(row["seq"])
        checkpoint = checkpoints.get(chain)
        if checkpoint is not None and row["seq"] <= checkpoint["through_seq"]:
            broken.append(row["seq"])  # a row the checkpoint says was compacted away
        previous[chain] = row["entry_hash"]
        if chain == MAIN and entry.get("kind") == COMPACTION:
            recorded[entry["chain"]] = (entry["through_seq"], entry["through_hash"], entry["rows_compacted"])
    for chain, row in checkpoints.items():
        if recorded.get(chain) != (row["through_seq"], row["entry_hash"], row["rows_compacted"]):
            broken.append(int(row["through_seq"]))  # a checkpoint the main chain does not vouch for
    return sorted(set(broken))
