"""A naive Engram memory server, written the quick way on the SDK's high-level MCPServer.

It is a deliberate negative target for the conformance harness: the six tool
names with plausible typed parameters, an in-memory store, and plain dicts as
results. It has the defects such a server usually has, and the harness must
name them: input schemas are derived from the signatures (not closed, so extra
fields are silently dropped), errors are free text instead of the contract's
envelope, an unknown tool is an ``isError`` result instead of -32602, and the
host binding in ``_meta`` is never looked at.

Run: ``python tests/thirdparty/naive_server.py`` (stdio).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
import uuid
from typing import Any

from mcp.server import MCPServer

# Plain log lines on stderr: the SDK's default console handler renders every traceback as a
# highlighted panel, which takes minutes when an argument is a megabyte long.
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")

app = MCPServer("naive-engram-memory", version="0.0.1")

CANDIDATES: dict[str, dict[str, Any]] = {}
RECORDS: dict[str, dict[str, Any]] = {}
KEYS: dict[str, dict[str, Any]] = {}


def _digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _text_of(payload: dict[str, Any]) -> str:
    return " ".join(str(c.get("text", "")) for c in payload.get("components", []) if isinstance(c, dict))


@app.tool()
def engram_memory_search(query: str, purpose_ref: str, limit: int = 10, max_packet_bytes: int | None = None,
                         capability_policy: str = "lexical", page_cursor: str | None = None) -> dict[str, Any]:
    """Search the stored memories by keyword."""
    words = query.lower().split()
    hits = [r for r in RECORDS.values() if not r["forgotten"] and any(w in r["text"].lower() for w in words)]
    start = int(page_cursor or 0)
    page = hits[start:start + limit]
    return {
        "results": [{"record_id": r["record_id"], "snippet": r["text"][:200]} for r in page],
        "next_cursor": str(start + limit) if start + limit < len(hits) else None,
    }


@app.tool()
def engram_memory_get(record_id: str, purpose_ref: str, max_packet_bytes: int | None = None) -> dict[str, Any]:
    """Read one memory record."""
    record = RECORDS.get(record_id)
    if record is None or record["forgotten"]:
        raise ValueError(f"record {record_id} not found")
    return {"record": record}


@app.tool()
def engram_memory_capture(idempotency_key: str, payload: dict[str, Any], evidence: dict[str, Any]) -> dict[str, Any]:
    """Propose a new memory; it stays pending until admission."""
    if idempotency_key in KEYS:
        return KEYS[idempotency_key]
    candidate_id = "cand_" + uuid.uuid4().hex
    CANDIDATES[candidate_id] = {"payload": payload, "evidence": evidence, "status": "pending"}
    result = {"candidate_id": candidate_id, "status": "committed_pending", "record_digest": _digest(payload)}
    KEYS[idempotency_key] = result
    return result


@app.tool()
def engram_memory_request_admission(candidate_id: str, idempotency_key: str) -> dict[str, Any]:
    """Ask for a pending candidate to be admitted (this server admits everything)."""
    candidate = CANDIDATES.get(candidate_id)
    if candidate is None:
        raise ValueError(f"unknown candidate {candidate_id}")
    record_id = "mem_" + uuid.uuid4().hex[:16]
    candidate["status"] = "accepted"
    RECORDS[record_id] = {
        "record_id": record_id,
        "text": _text_of(candidate["payload"]),
        "payload": candidate["payload"],
        "created_at": int(time.time() * 1000),
        "forgotten": False,
    }
    return {"outcome": {"status": "accepted", "record_id": record_id}}


@app.tool()
def engram_memory_withdraw(candidate_id: str, idempotency_key: str, reason_ref: str) -> dict[str, Any]:
    """Withdraw a pending candidate."""
    candidate = CANDIDATES.pop(candidate_id, None)
    if candidate is None:
        raise ValueError(f"unknown candidate {candidate_id}")
    return {"withdrawn": True, "candidate_id": candidate_id}


@app.tool()
def engram_memory_forget(record_id: str, idempotency_key: str, reason_ref: str) -> dict[str, Any]:
    """Forget a memory record."""
    record = RECORDS.get(record_id)
    if record is None:
        raise ValueError(f"record {record_id} not found")
    record["forgotten"] = True
    return {"forgotten": True, "record_id": record_id}


if __name__ == "__main__":
    app.run("stdio")
