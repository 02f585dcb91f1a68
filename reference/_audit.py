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

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from engram_mcp.contract import ZERO_DIGEST, profile_digest
from engram_mcp.contract.binding import Binding
from engram_mcp.contract.validation import instant
from engram_mcp.reference._group_commit import GroupCommit
from engram_mcp.reference._ports import AuditRow, Chain, MemoryStore, StoreReader, StoreTransaction

MAIN: Chain = "main"
REFUSED: Chain = "refused"
ANSWERED = frozenset({"ok", "input_required"})  # outcomes that go to the main chain
COMPACTION = "audit-compaction"


def chain_of(outcome: str) -> Chain:
    return MAIN if outcome in ANSWERED else REFUSED


def _hash(entry: dict[str, Any], previous: str) -> str:
    return profile_digest("audit-entry", {**entry, "previous_hash": previous})


class AuditJournal:
    def __init__(self, store: MemoryStore, *, refused_rows: int = 100_000) -> None:
        if refused_rows < 1:
            raise ValueError("refused_rows must be positive")
        self.store = store
        self.refused_rows = refused_rows
        # Compact a tenth past the bound at a time, so a flood of refusals costs one delete per batch.
        self._slack = max(1, refused_rows // 10)
        # The refused chain's head as this journal last appended it, and the rows the chain then held: while the
        # head is still that row, no other writer (replica) appended or compacted since, so no recount is needed.
        self._refused_seen: tuple[str, int] | None = None
        self._batched: GroupCommit[tuple[str, Binding, str, str]] = GroupCommit(self._append_all)

    def append(self, audit_id: str, binding: Binding, tool: str, outcome: str) -> None:
        """Record a call outside any other unit of work: committed before it returns, in one unit of work with
        the rows other calls hand in meanwhile (reference/_group_commit.py)."""
        self._batched.commit((audit_id, binding, tool, outcome))

    def _append_all(self, rows: Sequence[tuple[str, Binding, str, str]]) -> None:
        def work(tx: StoreTransaction) -> None:
            for row in rows:
                self.append_in(tx, *row)

        self.store.transaction(work)

    def append_in(self, tx: StoreTransaction, audit_id: str, binding: Binding, tool: str, outcome: str) -> None:
        """Record a call inside the caller's unit of work (a mutation's own, so both commit together)."""
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
        previous, appended = _link(tx, chain, entry)
        if chain != REFUSED:
            return
        # Judged in this unit of work, which holds the store's writers' lock, from the store itself whenever
        # another writer moved the chain: replicas appending in turn keep the one bound between them.
        seen = self._refused_seen
        held = seen[1] + 1 if seen is not None and seen[0] == previous else tx.audit_count(REFUSED)
        if held > self.refused_rows + self._slack:
            _compact(tx, held - self.refused_rows)
            self._refused_seen = None  # recounted at the next append, once per batch
        else:
            self._refused_seen = (appended, held)  # a rolled-back unit leaves a head no later append sees

    def verify(self) -> list[int]:
        """Sequence numbers whose entry breaks a chain; empty when the journal is intact."""
        with self.store.snapshot() as reader:
            return verify_in(reader)


def _compact(tx: StoreTransaction, rows: int) -> None:
    """Remove the ``rows`` oldest refused rows behind a checkpoint, vouched for by an entry of the main chain."""
    checkpoint = tx.audit_compact(REFUSED, rows)
    if checkpoint is None:
        return
    _link(tx, MAIN, {"kind": COMPACTION, "at": instant(datetime.now(UTC)), "chain": REFUSED,
                     "through_seq": checkpoint.through_seq, "through_hash": checkpoint.entry_hash,
                     "rows_compacted": checkpoint.rows_compacted})


def _link(tx: StoreTransaction, chain: Chain, entry: dict[str, Any]) -> tuple[str, str]:
    """Append ``entry`` to ``chain``; the hash it follows and its own."""
    previous = tx.audit_head(chain)
    entry_hash = _hash(entry, previous)
    tx.audit_append(AuditRow(0, chain, entry, entry_hash, previous))
    return previous, entry_hash


def verify_in(reader: StoreReader) -> list[int]:
    """Each chain from its genesis or checkpoint; a checkpoint must be the one the main chain last recorded."""
    broken: list[int] = []
    checkpoints = reader.audit_checkpoints()
    previous: dict[str, str] = {chain: (checkpoints[chain].entry_hash if chain in checkpoints else ZERO_DIGEST)
                                for chain in (MAIN, REFUSED)}
    recorded: dict[str, tuple[int, str, int]] = {}
    for row in reader.audit_rows():
        chain, entry = row.chain, row.entry
        start = previous.get(chain, ZERO_DIGEST)
        if row.previous_hash != start or row.entry_hash != _hash(entry, start):
            broken.append(row.seq)
        checkpoint = checkpoints.get(chain)
        if checkpoint is not None and row.seq <= checkpoint.through_seq:
            broken.append(row.seq)  # a row the checkpoint says was compacted away
        previous[chain] = row.entry_hash
        if chain == MAIN and entry.get("kind") == COMPACTION:
            recorded[entry["chain"]] = (entry["through_seq"], entry["through_hash"], entry["rows_compacted"])
    for chain, point in checkpoints.items():
        if recorded.get(chain) != (point.through_seq, point.entry_hash, point.rows_compacted):
            broken.append(point.through_seq)  # a checkpoint the main chain does not vouch for
    return sorted(set(broken))
