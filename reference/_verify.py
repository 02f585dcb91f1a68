"""engram-reference verify: the store file's integrity and both hash chains."""

from __future__ import annotations

import json

from engram_mcp.contract import ZERO_DIGEST, receipt_digest
from engram_mcp.reference._audit import AuditJournal
from engram_mcp.reference._config import ServerConfig
from engram_mcp.reference._store import MIGRATIONS, Store


def verify_store(config: ServerConfig) -> list[str]:
    """Problems found, as constant descriptions; empty when everything verifies."""
    if not config.store.exists():
        return ["the store file does not exist"]
    store = Store(config.store)
    problems: list[str] = []
    try:
        with store.read() as db:
            if db.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                problems.append("sqlite integrity check failed")
            if store.schema_version != len(MIGRATIONS):
                problems.append("the store schema is not at the current version")
            previous, expected_cursor = ZERO_DIGEST, 1
            for row in db.execute("SELECT cursor, event, event_hash, previous_hash FROM journal ORDER BY cursor"):
                body = json.loads(row["event"])
                if row["cursor"] != expected_cursor:
                    problems.append(f"journal cursor gap before {row['cursor']}")
                if row["previous_hash"] != previous or body.get("previous_event_hash") != previous:
                    problems.append(f"journal chain broken at cursor {row['cursor']}")
                if receipt_digest("memory-journal-event", body, "event_hash") != row["event_hash"]:
                    problems.append(f"journal event {row['cursor']} does not match its hash")
                previous, expected_cursor = row["event_hash"], row["cursor"] + 1
        problems += [f"audit chain broken at entry {seq}" for seq in AuditJournal(store).verify()]
    finally:
        store.close()
    return problems
