"""The append-only audit journal: each call's auditId, principal, tool and outcome, hash-chained.

It never holds content — no arguments, no text, no ids of records — so that
keeping it forever reveals nothing a forget was meant to remove.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from engram_mcp.contract import ZERO_DIGEST, profile_digest
from engram_mcp.contract.binding import Binding
from engram_mcp.contract.validation import instant
from engram_mcp.reference._store import Store


class AuditJournal:
    def __init__(self, store: Store) -> None:
        self.store = store

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
        with self.store.write() as db:
            last = db.execute("SELECT entry_hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
            previous = last["entry_hash"] if last else ZERO_DIGEST
            entry_hash = profile_digest("audit-entry", {**entry, "previous_hash": previous})
            db.execute(
                "INSERT INTO audit (entry, entry_hash, previous_hash) VALUES (?, ?, ?)",
                (json.dumps(entry, sort_keys=True), entry_hash, previous),
            )

    def verify(self) -> list[int]:
        """Sequence numbers whose entry breaks the chain; empty when the journal is intact."""
        broken, previous = [], ZERO_DIGEST
        with self.store.read() as db:
            for row in db.execute("SELECT seq, entry, entry_hash, previous_hash FROM audit ORDER BY seq"):
                expected = profile_digest("audit-entry", {**json.loads(row["entry"]), "previous_hash": previous})
                if row["previous_hash"] != previous or row["entry_hash"] != expected:
                    broken.append(row["seq"])
                previous = row["entry_hash"]
        return broken
