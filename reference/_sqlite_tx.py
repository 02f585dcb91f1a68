"""The store port's unit of work on SQLite: every domain read and write of the engine, as SQL.

One ``SqliteTransaction`` wraps the connection of one ``BEGIN IMMEDIATE``
transaction (or one read snapshot); ``SqliteStore.transaction`` commits it.
SQLite has a single writer, so a unit of work never needs to be re-run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from engram_mcp.contract import ZERO_DIGEST
from engram_mcp.contract.validation import instant
from engram_mcp.reference import _ledger_bytes
from engram_mcp.reference import _search as search_index
from engram_mcp.reference._ports import (
    AuditCheckpoint,
    AuditRow,
    CandidateState,
    Chain,
    Holdings,
    JournalEntry,
    NewCandidate,
    Outstanding,
    Reservation,
    Scope,
    Sealed,
    StoredCandidate,
    StoredRecord,
    Subject,
)
from engram_mcp.reference._quotas import HOLDINGS_DRIFT_SQL, holder_key, recount_holdings_sql
from engram_mcp.reference._sqlite import sqlite3

_RECOUNT_HOLDINGS = recount_holdings_sql("?")
_READ_LEDGER, _ADD_LEDGER = _ledger_bytes.read_sql("?"), _ledger_bytes.add_sql("?")


class SqliteTransaction:
    """``StoreTransaction`` over one SQLite connection inside an open transaction."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.sql = db  # SQLite-specific inspection (tests, verify); never used by the engine

    # -- idempotency ------------------------------------------------------------------

    def reservation(self, scope: Scope, principal: str, key: str) -> Reservation | None:
        row = self.sql.execute(
            "SELECT intent, value FROM reservations WHERE tenant = ? AND workspace = ? AND principal = ? AND "
            "idempotency_key = ?",
            (scope.tenant, scope.workspace, principal, key),
        ).fetchone()
        return None if row is None else Reservation(row["intent"], json.loads(row["value"]))

    def add_ledger_bytes(self, tenant: str, principal: str, written: int) -> None:
        self.sql.execute(_ADD_LEDGER, (tenant, principal, written))

    def reserve(self, scope: Scope, principal: str, key: str, reservation: Reservation) -> None:
        self.sql.execute(
            "INSERT INTO reservations VALUES (?, ?, ?, ?, ?, ?)",
            (scope.tenant, scope.workspace, principal, key, reservation.intent,
             json.dumps(reservation.value, sort_keys=True)),
        )

    def update_reservation(self, scope: Scope, principal: str, key: str, value: dict[str, Any]) -> None:
        self.sql.execute(
            "UPDATE reservations SET value = ? WHERE tenant = ? AND workspace = ? AND principal = ? AND "
            "idempotency_key = ?",
            (json.dumps(value, sort_keys=True), scope.tenant, scope.workspace, principal, key),
        )

    # -- journal ------------------------------------------------------------------------

    def journal_head(self) -> tuple[int, str]:
        last = self.sql.execute("SELECT cursor, event_hash FROM journal ORDER BY cursor DESC LIMIT 1").fetchone()
        return (0, ZERO_DIGEST) if last is None else (int(last["cursor"]), last["event_hash"])

    def journal_append(self, entry: JournalEntry) -> None:
        self.sql.execute(
            "INSERT INTO journal VALUES (?, ?, ?, ?, ?, ?)",
            (entry.cursor, entry.scope.tenant, entry.scope.workspace, json.dumps(entry.event, sort_keys=True),
             entry.event_hash, entry.previous_hash),
        )

    def journal(self) -> Iterator[JournalEntry]:
        for row in self.sql.execute("SELECT * FROM journal ORDER BY cursor"):
            yield JournalEntry(row["cursor"], Scope(row["tenant"], row["workspace"]), json.loads(row["event"]),
                               row["event_hash"], row["previous_hash"])

    def scope_cursor(self, scope: Scope) -> int:
        row = self.sql.execute(
            "SELECT MAX(cursor) FROM journal WHERE tenant = ? AND workspace = ?", (scope.tenant, scope.workspace)
        ).fetchone()
        return int(row[0] or 0)

    # -- candidates -----------------------------------------------------------------------

    def candidate(self, scope: Scope, candidate_id: str) -> StoredCandidate | None:
        row = self.sql.execute(
            "SELECT c.*, r.state AS record_state FROM candidates c "
            "LEFT JOIN records r ON r.tenant = c.tenant AND r.workspace = c.workspace AND r.record_id = c.record_id "
            "WHERE c.tenant = ? AND c.workspace = ? AND c.candidate_id = ?",
            (scope.tenant, scope.workspace, candidate_id),
        ).fetchone()
        return None if row is None else _candidate(row)

    def store_candidate(self, candidate: NewCandidate) -> None:
        self.sql.execute(
            "INSERT INTO candidates (candidate_id, tenant, workspace, principal, state, record_id, payload_digest, "
            "created_cursor, ciphertext, wrapped_key, created_ms, body_bytes) "
            "VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?)",
            (candidate.candidate_id, candidate.scope.tenant, candidate.scope.workspace, candidate.principal,
             candidate.record_id, candidate.payload_digest, candidate.created_cursor, candidate.sealed.ciphertext,
             candidate.sealed.wrapped_key, candidate.created_ms, len(candidate.sealed.ciphertext)),
        )

    def close_candidate(
        self, scope: Scope, candidate_id: str, state: CandidateState, *, payload_digest: str | None = None
    ) -> None:
        self.sql.execute(
            "UPDATE candidates SET state = ?, ciphertext = NULL, wrapped_key = NULL, "
            "payload_digest = COALESCE(?, payload_digest) WHERE tenant = ? AND workspace = ? AND candidate_id = ?",
            (state, payload_digest, scope.tenant, scope.workspace, candidate_id),
        )

    def pending_due(self, created_before_ms: int, limit: int) -> list[StoredCandidate]:
        rows = self.sql.execute(
            "SELECT c.*, NULL AS record_state FROM candidates c WHERE state = 'pending' AND created_ms <= ? "
            "ORDER BY created_ms LIMIT ?",
            (created_before_ms, limit),
        ).fetchall()
        return [_candidate(row) for row in rows]

    def holdings(self, tenant: str, principal: str | None = None) -> Holdings:
        row = self.sql.execute(
            "SELECT pending, bytes FROM holdings WHERE tenant = ? AND holder = ? AND principal = ?",
            holder_key(tenant, principal),
        ).fetchone()
        return Holdings(0, 0) if row is None else Holdings(int(row["pending"]), int(row["bytes"]))

    def recount_holdings(self, tenant: str, principal: str | None = None) -> Holdings:
        row = self.sql.execute(_RECOUNT_HOLDINGS, holder_key(tenant, principal)).fetchone()
        return Holdings(int(row["pending"]), int(row["bytes"]))

    def holdings_drift(self) -> bool:
        return self.sql.execute(HOLDINGS_DRIFT_SQL).fetchone() is not None

    def ledger_bytes(self, tenant: str, principal: str | None = None) -> int:
        row = self.sql.execute(_READ_LEDGER, holder_key(tenant, principal)).fetchone()
        return 0 if row is None else int(row["bytes"])

    # -- records and their index -------------------------------------------------------------

    def record(self, scope: Scope, record_id: str) -> StoredRecord | None:
        row = self.sql.execute(
            "SELECT * FROM records WHERE tenant = ? AND workspace = ? AND record_id = ?",
            (scope.tenant, scope.workspace, record_id),
        ).fetchone()
        return None if row is None else _record(row)

    def admit(self, scope: Scope, candidate_id: str, record: dict[str, Any], cursor: int) -> None:
        valid_time = record["valid_time"]
        rowid = self.sql.execute(
            "INSERT INTO records (record_id, tenant, workspace, candidate_id, state, body, payload_digest, "
            "valid_from, valid_to, expires_at, recorded_cursor) VALUES (?, ?, ?, ?, 'accepted_current', ?, ?, ?, "
            "?, ?, ?)",
            (record["record_id"], scope.tenant, scope.workspace, candidate_id, json.dumps(record, ensure_ascii=False),
             record["payload_digest"], valid_time["t"], valid_time.get("t_end"),
             record["retention"].get("expires_at"), cursor),
        ).lastrowid
        table = search_index.fts_table(scope)
        if not self._has_table(table):
            self.sql.execute(search_index.create_table_sql(scope))
            self.sql.execute(search_index.secure_delete_sql(table))
        placeholders = ", ".join("?" for _ in search_index.FIELDS)
        self.sql.execute(
            f"INSERT INTO {table} (rowid, {', '.join(search_index.FIELDS)}) VALUES (?, "
            f"{placeholders})",
            (rowid, *search_index.field_texts(record)),
        )

    def forget(self, scope: Scope, record_id: str, keyed_digest: str) -> None:
        row = self.sql.execute(
            "SELECT rowid, body FROM records WHERE tenant = ? AND workspace = ? AND record_id = ?",
            (scope.tenant, scope.workspace, record_id),
        ).fetchone()
        fts = search_index.fts_table(scope)
        self.sql.execute(f"DELETE FROM {fts} WHERE rowid = ?", (row["rowid"],))
        # The scope's index has FTS5 secure-delete on (reference/_search.py): the delete takes the row's terms
        # out of the leaf pages. The segment's page directory (<table>_idx) still keeps, per leaf page, a prefix of
        # the page's first term as it was written; when that prefix is the start of a forgotten word and no live
        # word shares it, the index is rebuilt from the live rows ('optimize' would not do: on an index that is
        # already one segment it writes nothing).
        words = search_index.index_words(search_index.field_texts(json.loads(row["body"]))) if row["body"] else None
        if words is None or self._directory_keeps_a_forgotten_prefix(fts, words):
            self.sql.execute(f"INSERT INTO {fts} ({fts}) VALUES ('rebuild')")
        self.sql.execute(
            "UPDATE records SET state = 'tombstoned', body = NULL, payload_digest = ? WHERE rowid = ?",
            (keyed_digest, row["rowid"]),
        )
        self.sql.execute("INSERT OR IGNORE INTO tombstones VALUES (?, ?, ?)",
                         (scope.tenant, scope.workspace, keyed_digest))

    def _directory_keeps_a_forgotten_prefix(self, fts: str, words: set[str]) -> bool:
        """Whether a page-directory prefix starts a forgotten word and no live term of the index starts with it."""
        # Only the directory entries that start a forgotten word matter. The words are ASCII (index_words), so
        # the directory is filtered in SQL against their prefixes instead of read whole: its size grows with
        # the index, the forgotten record's prefixes do not. The first byte of a term names the index.
        prefixes = sorted({word[:end] for word in words for end in range(1, len(word) + 1)})
        suspects = self.sql.execute(
            f"SELECT DISTINCT CAST(substr(term, 2) AS TEXT) FROM {fts}_idx "
            "WHERE length(term) > 1 AND CAST(substr(term, 2) AS TEXT) IN (SELECT value FROM json_each(?))",
            (json.dumps(prefixes),),
        ).fetchall()
        if not suspects:
            return False
        # A live term starting with the prefix is found by a seek in the index's term list (a vocabulary table,
        # on this connection only: it stores nothing), not by a prefix MATCH, which merges every such term's
        # documents. Terms are listed in order, so the first one at or after the prefix tells.
        terms = f"temp.{fts}_terms"
        self.sql.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {terms} USING fts5vocab(main, {fts}, 'instance')")
        for (prefix,) in suspects:
            first = self.sql.execute(f"SELECT term FROM {terms} WHERE term >= ? LIMIT 1", (prefix,)).fetchone()
            if first is None or not str(first[0]).startswith(prefix):
                return True
        return False

    def is_tombstoned(self, scope: Scope, payload_digest: str) -> bool:
        return self.sql.execute(
            "SELECT 1 FROM tombstones WHERE tenant = ? AND workspace = ? AND payload_digest = ?",
            (scope.tenant, scope.workspace, payload_digest),
        ).fetchone() is not None

    def search(self, scope: Scope, tokens: Sequence[str], valid_as_of_ms: int, limit: int) -> list[str]:
        table = search_index.fts_table(scope)
        if not tokens or not self._has_table(table):
            return []
        match = search_index.match_expression(list(tokens))
        expiry_instant = instant(datetime.fromtimestamp(valid_as_of_ms / 1000, UTC))
        fetch = limit + search_index.OVERFETCH
        while True:
            rows = [(row[0], row[1], row[2]) for row in self.sql.execute(
                search_index.ranked_matches_sql(table), (match, fetch, valid_as_of_ms, valid_as_of_ms, expiry_instant)
            )]
            found = search_index.top_ranked(rows, fetch, limit)
            if found is not None:
                return found
            fetch *= search_index.FETCH_GROWTH

    def _has_table(self, name: str) -> bool:
        return self.sql.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None

    # -- confirmation ids -----------------------------------------------------------------------

    def consume_confirmation(self, nonce: str, at: str) -> bool:
        try:
            self.sql.execute("INSERT INTO consumed_states VALUES (?, ?)", (nonce, at))
        except sqlite3.IntegrityError:
            return False
        return True

    def purge_confirmations(self, consumed_before: str) -> None:
        self.sql.execute("DELETE FROM consumed_states WHERE consumed_at < ?", (consumed_before,))

    # -- erasures ---------------------------------------------------------------------------------

    def record_erasure(self, subject: Subject, scope: Scope, subject_id: str, cursor: int, at: str) -> int:
        erasure_id = self.sql.execute(
            "INSERT INTO erasures (subject, tenant, workspace, subject_id, cursor, requested_at, state) "
            "VALUES (?, ?, ?, ?, ?, ?, 'pending')",
            (subject, scope.tenant, scope.workspace, subject_id, cursor, at),
        ).lastrowid
        return int(cast(int, erasure_id))

    def erasure_complete(self, erasure_id: int) -> bool:
        row = self.sql.execute("SELECT state FROM erasures WHERE erasure_id = ?", (erasure_id,)).fetchone()
        return row is not None and row[0] == "complete"

    def outstanding_erasures(self) -> list[Outstanding]:
        rows = self.sql.execute(
            "SELECT erasure_id, subject, tenant, workspace, subject_id, cursor, requested_at "
            "FROM erasures WHERE state = 'pending' ORDER BY erasure_id"
        ).fetchall()
        return [Outstanding(*tuple(row)) for row in rows]

    def complete_erasures(self, erasure_ids: Sequence[int], at: str) -> None:
        self.sql.executemany(
            "UPDATE erasures SET state = 'complete', completed_at = ? WHERE erasure_id = ? AND state = 'pending'",
            [(at, erasure_id) for erasure_id in erasure_ids],
        )

    # -- audit -------------------------------------------------------------------------------------

    def audit_head(self, chain: Chain) -> str:
        last = self.sql.execute(
            "SELECT entry_hash FROM audit WHERE chain = ? ORDER BY seq DESC LIMIT 1", (chain,)
        ).fetchone()
        if last is not None:
            return str(last["entry_hash"])
        checkpoint = self.audit_checkpoints().get(chain)
        return checkpoint.entry_hash if checkpoint is not None else ZERO_DIGEST

    def audit_count(self, chain: Chain) -> int:
        return int(self.sql.execute("SELECT COUNT(*) FROM audit WHERE chain = ?", (chain,)).fetchone()[0])

    def audit_append(self, row: AuditRow) -> int:
        seq = self.sql.execute(
            "INSERT INTO audit (entry, entry_hash, previous_hash, chain) VALUES (?, ?, ?, ?)",
            (json.dumps(row.entry, sort_keys=True), row.entry_hash, row.previous_hash, row.chain),
        ).lastrowid
        return int(cast(int, seq))

    def audit_compact(self, chain: Chain, rows: int) -> AuditCheckpoint | None:
        last = self.sql.execute(
            "SELECT seq, entry_hash FROM audit WHERE chain = ? ORDER BY seq LIMIT 1 OFFSET ?", (chain, rows - 1)
        ).fetchone()
        if last is None:
            return None
        removed = self.sql.execute("DELETE FROM audit WHERE chain = ? AND seq <= ?", (chain, last["seq"])).rowcount
        before = self.audit_checkpoints().get(chain)
        checkpoint = AuditCheckpoint(chain, int(last["seq"]), last["entry_hash"],
                                     (before.rows_compacted if before else 0) + removed)
        self.sql.execute(
            "INSERT INTO audit_checkpoints VALUES (?, ?, ?, ?) ON CONFLICT (chain) DO UPDATE SET "
            "through_seq = excluded.through_seq, entry_hash = excluded.entry_hash, rows_compacted = "
            "excluded.rows_compacted",
            (chain, checkpoint.through_seq, checkpoint.entry_hash, checkpoint.rows_compacted),
        )
        return checkpoint

    def audit_rows(self) -> Iterator[AuditRow]:
        for row in self.sql.execute("SELECT seq, entry, entry_hash, previous_hash, chain FROM audit ORDER BY seq"):
            yield AuditRow(row["seq"], row["chain"], json.loads(row["entry"]), row["entry_hash"], row["previous_hash"])

    def audit_checkpoints(self) -> dict[Chain, AuditCheckpoint]:
        return {
            row["chain"]: AuditCheckpoint(row["chain"], row["through_seq"], row["entry_hash"], row["rows_compacted"])
            for row in self.sql.execute("SELECT * FROM audit_checkpoints")
        }


def _candidate(row: sqlite3.Row) -> StoredCandidate:
    sealed = Sealed(row["ciphertext"], row["wrapped_key"]) if row["ciphertext"] is not None else None
    return StoredCandidate(
        row["candidate_id"], Scope(row["tenant"], row["workspace"]), row["principal"], row["state"],
        row["record_id"], row["payload_digest"], row["created_cursor"], sealed, row["created_ms"], row["record_state"],
    )


def _record(row: sqlite3.Row) -> StoredRecord:
    return StoredRecord(
        row["record_id"], Scope(row["tenant"], row["workspace"]), row["candidate_id"], row["state"],
        json.loads(row["body"]) if row["body"] is not None else None, row["payload_digest"], row["valid_from"],
        row["valid_to"], row["expires_at"], row["recorded_cursor"],
    )
