"""The store port's reads and writes, in PostgreSQL (reference/_postgres.py runs them in transactions).

Every statement names its scope's tenant and workspace when it reads or writes
a scope's rows, so another scope's rows are never returned, matched or counted.
Lexical search ranks with ``ts_rank`` over a weighted tsvector per record,
served by a GIN index: ``ts_rank`` scores a document from its own terms only
(no corpus statistics), so no other record, in any scope, moves a score. When
more records match than the candidate cap, the most recently recorded ones are
ranked, so a frequent word costs no more than the cap (profile 2.0.0; 1.0.0
scored every match first).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from engram_mcp.contract import ZERO_DIGEST, profile_digest
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
    RankingProfile,
    Reservation,
    Scope,
    Sealed,
    StoredCandidate,
    StoredRecord,
    Subject,
)
from engram_mcp.reference._postgres_schema import SEARCH_CONFIG
from engram_mcp.reference._quotas import HOLDINGS_DRIFT_SQL, holder_key, recount_holdings_sql

# tsvector weight classes, in search_index.FIELDS order: PostgreSQL has four, so citations share D with context.
FIELD_CLASSES = ("A", "B", "C", "D", "D")
# ts_rank's weights for {D, C, B, A}: the field weights scaled so that the primary text counts 1.
CLASS_WEIGHTS = tuple(w / search_index.FIELD_WEIGHTS[0] for w in (
    search_index.FIELD_WEIGHTS[3], search_index.FIELD_WEIGHTS[2], search_index.FIELD_WEIGHTS[1],
    search_index.FIELD_WEIGHTS[0],
))
RANK_NORMALIZATION = 1  # divide by 1 + log(document length), as BM25 damps long documents

RANKING = RankingProfile(
    name="reference_pg_tsvector_rank",
    # 2.0.0: past the cap, the most recently recorded matches are ranked, not the best-scored of all of them.
    version="2.0.0",
    scoring_formula="engram-memory-mcp:pg-ts-rank-rrf:v2",
    config_digest=profile_digest(
        "profile-config",
        {
            "profile": "reference_pg_tsvector_rank",
            "text_search_config": SEARCH_CONFIG,
            "fields": list(search_index.FIELDS),
            "field_classes": list(FIELD_CLASSES),
            "class_weights": list(CLASS_WEIGHTS),
            "normalization": RANK_NORMALIZATION,
            "candidates": "most recently recorded matches, up to max_candidates",
            "rrf_k": search_index.RRF_K,
            "weights": {"lexical": search_index.LEXICAL_WEIGHT, "recency": search_index.RECENCY_WEIGHT},
        },
    ),
)

_SEARCH_VECTOR = " || ".join(
    f"setweight(to_tsvector('{SEARCH_CONFIG}', %s), '{weight}')" for weight in FIELD_CLASSES
)
_RANK_WEIGHTS = "'{" + ",".join(str(w) for w in CLASS_WEIGHTS) + "}'::float4[]"


def _text(value: str) -> str:
    """PostgreSQL text cannot hold U+0000; for indexing only, it separates words like a space."""
    return value.replace("\x00", " ")


def scope_lexeme(scope: Scope) -> str:
    """A term every record of the scope carries in its tsvector, so the GIN index itself narrows to the scope.

    The words' parser never yields a '~', so no text can produce it; and the scope is checked on the row too.
    """
    return "~" + search_index.fts_table(scope).removeprefix("fts_")


def _tsquery(tokens: Sequence[str]) -> str:
    # Tokens are \w+ only (search_index.query_tokens), so quoting them cannot inject tsquery syntax.
    return " | ".join(f"'{_text(token)}'" for token in tokens)


PREFETCHED = 50  # the largest page (search.limit.max): its records come back with the ranked ids
_RECORD_COLUMNS = ("candidate_id, state, body, payload_digest, valid_from, valid_to, expires_at, "
                   "recorded_cursor")

# The scope's matches, the CAP most recently recorded of them, ranked by ts_rank, and the rows of the
# first PREFETCHED ranked ones: one round trip for a page. Rare words are read from the GIN index
# (partial on accepted_current), intersected with the scope's own term; a frequent word is better met by
# walking the scope's records newest first (records_recent) until CAP of them match, so the cost of a
# query stays bounded by the cap whatever the number of matches. ts_rank scores the words alone.
SEARCH_SQL = (
    "WITH recent AS (SELECT r.ctid AS row_id, r.record_id, r.search, q "
    f"FROM records r, to_tsquery('{SEARCH_CONFIG}', %(words)s) AS q "
    "WHERE numnode(q) > 0 AND r.tenant = %(tenant)s AND r.workspace = %(workspace)s "
    "AND r.state = 'accepted_current' AND r.search @@ (q && %(scope_term)s::tsquery) "
    "AND r.valid_from <= %(as_of_ms)s AND (r.valid_to IS NULL OR r.valid_to >= %(as_of_ms)s) "
    "AND (r.expires_at IS NULL OR r.expires_at > %(as_of)s) "
    "ORDER BY r.recorded_cursor DESC, r.record_id LIMIT %(cap)s), "
    "ranked AS (SELECT row_id, record_id, row_number() OVER (ORDER BY "
    f"ts_rank({_RANK_WEIGHTS}, search, q, {RANK_NORMALIZATION}) DESC, record_id) AS position FROM recent) "
    f"SELECT ranked.record_id, {', '.join(f'r.{c}' for c in _RECORD_COLUMNS.split(', '))} FROM ranked "
    "LEFT JOIN LATERAL (SELECT * FROM records WHERE ranked.position <= %(prefetched)s "
    "AND ctid = ranked.row_id OFFSET 0) r ON true "  # OFFSET 0: looked up by address, row by row, never joined
    "ORDER BY ranked.position"
)


def search_parameters(scope: Scope, tokens: Sequence[str], valid_as_of_ms: int, limit: int) -> dict[str, Any]:
    as_of = instant(datetime.fromtimestamp(valid_as_of_ms / 1000, UTC))
    return {"words": _tsquery(tokens), "tenant": scope.tenant, "workspace": scope.workspace,
            "scope_term": f"'{scope_lexeme(scope)}'", "as_of_ms": valid_as_of_ms, "as_of": as_of, "cap": limit,
            "prefetched": PREFETCHED}


def _record(scope: Scope, row: dict[str, Any]) -> StoredRecord:
    return StoredRecord(
        record_id=row["record_id"],
        scope=scope,
        candidate_id=row["candidate_id"],
        state=row["state"],
        body=None if row["body"] is None else json.loads(bytes(row["body"]).decode("utf-8")),
        payload_digest=row["payload_digest"],
        valid_from=row["valid_from"],
        valid_to=row["valid_to"],
        expires_at=row["expires_at"],
        recorded_cursor=row["recorded_cursor"],
    )


def _candidate(row: dict[str, Any]) -> StoredCandidate:
    sealed = None if row["ciphertext"] is None else Sealed(bytes(row["ciphertext"]), bytes(row["wrapped_key"]))
    return StoredCandidate(
        candidate_id=row["candidate_id"],
        scope=Scope(row["tenant"], row["workspace"]),
        principal=row["principal"],
        state=row["state"],
        record_id=row["record_id"],
        payload_digest=row["payload_digest"],
        created_cursor=row["created_cursor"],
        sealed=sealed,
        created_ms=row["created_ms"],
        record_state=row.get("record_state"),
    )


_CANDIDATE = (
    "SELECT c.*, r.state AS record_state FROM candidates c LEFT JOIN records r "
    "ON r.tenant = c.tenant AND r.workspace = c.workspace AND r.record_id = c.record_id "
)

_RECOUNT_HOLDINGS = recount_holdings_sql("%s")
_READ_LEDGER, _ADD_LEDGER = _ledger_bytes.read_sql("%s"), _ledger_bytes.add_sql("%s")


class PostgresReader:
    """The port's reads on one psycopg connection inside an open transaction (rows as dicts).

    In a read-only snapshot, the records a search returned with its ranked ids are kept and served by
    ``record`` without another round trip: a snapshot sees the same rows from its first statement to its
    last. A unit of work (PostgresTransaction) keeps none, as its own writes could change them.
    """

    _keeps_searched = True

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._searched: dict[tuple[Scope, str], StoredRecord] = {}

    def _one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        return cast("dict[str, Any] | None", self.conn.execute(sql, params).fetchone())

    def reservation(self, scope: Scope, principal: str, key: str) -> Reservation | None:
        row = self._one(
            "SELECT intent, value FROM reservations WHERE tenant = %s AND workspace = %s AND principal = %s "
            "AND idempotency_key = %s",
            (scope.tenant, scope.workspace, principal, key),
        )
        return None if row is None else Reservation(row["intent"], json.loads(row["value"]))

    def candidate(self, scope: Scope, candidate_id: str) -> StoredCandidate | None:
        row = self._one(
            _CANDIDATE + "WHERE c.tenant = %s AND c.workspace = %s AND c.candidate_id = %s",
            (scope.tenant, scope.workspace, candidate_id),
        )
        return None if row is None else _candidate(row)

    def record(self, scope: Scope, record_id: str) -> StoredRecord | None:
        kept = self._searched.get((scope, record_id))
        if kept is not None:
            return kept
        row = self._one(
            f"SELECT record_id, {_RECORD_COLUMNS} FROM records WHERE tenant = %s AND workspace = %s "
            "AND record_id = %s",
            (scope.tenant, scope.workspace, record_id),
        )
        return None if row is None else _record(scope, row)

    def is_tombstoned(self, scope: Scope, payload_digest: str) -> bool:
        return self._one(
            "SELECT 1 FROM tombstones WHERE tenant = %s AND workspace = %s AND payload_digest = %s",
            (scope.tenant, scope.workspace, payload_digest),
        ) is not None

    def search(self, scope: Scope, tokens: Sequence[str], valid_as_of_ms: int, limit: int) -> list[str]:
        if not tokens:
            return []
        # Never prepared: a generic plan cannot tell a rare word (the GIN index) from a frequent one (newest first).
        rows = self.conn.execute(
            SEARCH_SQL, search_parameters(scope, tokens, valid_as_of_ms, limit), prepare=False
        ).fetchall()
        if self._keeps_searched:
            self._searched.update(
                ((scope, row["record_id"]), _record(scope, row)) for row in rows if row["state"] is not None
            )
        return [row["record_id"] for row in rows]

    def scope_cursor(self, scope: Scope) -> int:
        row = self._one(
            "SELECT MAX(cursor) AS c FROM journal WHERE tenant = %s AND workspace = %s", (scope.tenant, scope.workspace)
        )
        return int((row or {}).get("c") or 0)

    def journal_head(self) -> tuple[int, str]:
        row = self._one("SELECT cursor, event_hash FROM journal ORDER BY cursor DESC LIMIT 1")
        return (0, ZERO_DIGEST) if row is None else (int(row["cursor"]), row["event_hash"])

    def journal(self) -> Iterator[JournalEntry]:
        for row in self.conn.execute(
            "SELECT cursor, tenant, workspace, event, event_hash, previous_hash FROM journal ORDER BY cursor"
        ):
            yield JournalEntry(
                int(row["cursor"]), Scope(row["tenant"], row["workspace"]), json.loads(row["event"]),
                row["event_hash"], row["previous_hash"],
            )

    def holdings(self, tenant: str, principal: str | None = None) -> Holdings:
        row = self._one(
            "SELECT pending, bytes FROM holdings WHERE tenant = %s AND holder = %s AND principal = %s",
            holder_key(tenant, principal),
        )
        return Holdings(0, 0) if row is None else Holdings(pending=int(row["pending"]), bytes=int(row["bytes"]))

    def recount_holdings(self, tenant: str, principal: str | None = None) -> Holdings:
        row = self._one(_RECOUNT_HOLDINGS, holder_key(tenant, principal))
        assert row is not None  # an aggregate always answers one row
        return Holdings(pending=int(row["pending"]), bytes=int(row["bytes"]))

    def holdings_drift(self) -> bool:
        return self._one(HOLDINGS_DRIFT_SQL) is not None

    def ledger_bytes(self, tenant: str, principal: str | None = None) -> int:
        row = self._one(_READ_LEDGER, holder_key(tenant, principal))
        return 0 if row is None else int(row["bytes"])

    def pending_due(self, created_before_ms: int, limit: int) -> list[StoredCandidate]:
        rows = self.conn.execute(
            _CANDIDATE + "WHERE c.state = 'pending' AND c.created_ms <= %s ORDER BY c.created_ms LIMIT %s",
            (created_before_ms, limit),
        ).fetchall()
        return [_candidate(row) for row in rows]

    def erasure_complete(self, erasure_id: int) -> bool:
        row = self._one("SELECT state FROM erasures WHERE erasure_id = %s", (erasure_id,))
        return row is not None and row["state"] == "complete"

    def outstanding_erasures(self) -> list[Outstanding]:
        rows = self.conn.execute(
            "SELECT erasure_id, subject, tenant, workspace, subject_id, cursor, requested_at FROM erasures "
            "WHERE state = 'pending' ORDER BY erasure_id"
        ).fetchall()
        return [
            Outstanding(int(r["erasure_id"]), r["subject"], r["tenant"], r["workspace"], r["subject_id"],
                        int(r["cursor"]), r["requested_at"])
            for r in rows
        ]

    def audit_head(self, chain: Chain) -> str:
        row = self._one("SELECT entry_hash FROM audit WHERE chain = %s ORDER BY seq DESC LIMIT 1", (chain,))
        if row is None:
            row = self._one("SELECT entry_hash FROM audit_checkpoints WHERE chain = %s", (chain,))
        return ZERO_DIGEST if row is None else str(row["entry_hash"])

    def audit_count(self, chain: Chain) -> int:
        row = self._one("SELECT held FROM audit_counts WHERE chain = %s", (chain,))
        return int((row or {}).get("held") or 0)

    def audit_rows(self) -> Iterator[AuditRow]:
        for row in self.conn.execute("SELECT seq, chain, entry, entry_hash, previous_hash FROM audit ORDER BY seq"):
            yield AuditRow(int(row["seq"]), row["chain"], json.loads(row["entry"]), row["entry_hash"],
                           row["previous_hash"])

    def audit_checkpoints(self) -> dict[Chain, AuditCheckpoint]:
        rows = self.conn.execute("SELECT chain, through_seq, entry_hash, rows_compacted FROM audit_checkpoints")
        return {
            r["chain"]: AuditCheckpoint(r["chain"], int(r["through_seq"]), r["entry_hash"], int(r["rows_compacted"]))
            for r in rows
        }


class PostgresTransaction(PostgresReader):
    """The port's writes; the caller (PostgresStore.transaction) owns BEGIN, COMMIT and the retries."""

    _keeps_searched = False

    def add_ledger_bytes(self, tenant: str, principal: str, written: int) -> None:
        self.conn.execute(_ADD_LEDGER, (tenant, principal, written))

    def reserve(self, scope: Scope, principal: str, key: str, reservation: Reservation) -> None:
        # A plain INSERT: a concurrent reservation of the same key fails this unit of work (a unique or
        # serialization failure), and the store re-runs it, when it sees that reservation instead.
        self.conn.execute(
            "INSERT INTO reservations (tenant, workspace, principal, idempotency_key, intent, value) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            (scope.tenant, scope.workspace, principal, key, reservation.intent,
             json.dumps(reservation.value, sort_keys=True)),
        )

    def update_reservation(self, scope: Scope, principal: str, key: str, value: dict[str, Any]) -> None:
        self.conn.execute(
            "UPDATE reservations SET value = %s WHERE tenant = %s AND workspace = %s AND principal = %s "
            "AND idempotency_key = %s",
            (json.dumps(value, sort_keys=True), scope.tenant, scope.workspace, principal, key),
        )

    def journal_append(self, entry: JournalEntry) -> None:
        self.conn.execute(
            "INSERT INTO journal (tenant, cursor, workspace, event, event_hash, previous_hash) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            (entry.scope.tenant, entry.cursor, entry.scope.workspace, json.dumps(entry.event, sort_keys=True),
             entry.event_hash, entry.previous_hash),
        )

    def store_candidate(self, candidate: NewCandidate) -> None:
        self.conn.execute(
            "INSERT INTO candidates (tenant, workspace, candidate_id, principal, state, record_id, payload_digest, "
            "created_cursor, ciphertext, wrapped_key, created_ms, body_bytes) "
            "VALUES (%s, %s, %s, %s, 'pending', %s, %s, %s, %s, %s, %s, %s)",
            (candidate.scope.tenant, candidate.scope.workspace, candidate.candidate_id, candidate.principal,
             candidate.record_id, candidate.payload_digest, candidate.created_cursor, candidate.sealed.ciphertext,
             candidate.sealed.wrapped_key, candidate.created_ms, len(candidate.sealed.ciphertext)),
        )

    def close_candidate(
        self, scope: Scope, candidate_id: str, state: CandidateState, *, payload_digest: str | None = None
    ) -> None:
        self.conn.execute(
            "UPDATE candidates SET state = %s, ciphertext = NULL, wrapped_key = NULL, "
            "payload_digest = COALESCE(%s, payload_digest) WHERE tenant = %s AND workspace = %s AND candidate_id = %s",
            (state, payload_digest, scope.tenant, scope.workspace, candidate_id),
        )

    def admit(self, scope: Scope, candidate_id: str, record: dict[str, Any], cursor: int) -> None:
        valid_time = record["valid_time"]
        self.conn.execute(
            "INSERT INTO records (tenant, workspace, record_id, candidate_id, state, body, payload_digest, valid_from, "
            f"valid_to, expires_at, recorded_cursor, search) VALUES (%s, %s, %s, %s, 'accepted_current', %s, %s, %s, "
            f"%s, %s, %s, {_SEARCH_VECTOR} || array_to_tsvector(ARRAY[%s]))",
            (scope.tenant, scope.workspace, record["record_id"], candidate_id,
             json.dumps(record, ensure_ascii=False).encode("utf-8"), record["payload_digest"], valid_time["t"],
             valid_time.get("t_end"), record["retention"].get("expires_at"), cursor,
             *(_text(text) for text in search_index.field_texts(record)), scope_lexeme(scope)),
        )

    def forget(self, scope: Scope, record_id: str, keyed_digest: str) -> None:
        # The body and the index entry go in one update; VACUUM (the residue flush) removes the old version.
        # One statement: a data-modifying WITH runs to completion whether or not its result is read.
        self.conn.execute(
            "WITH erased AS (UPDATE records SET state = 'tombstoned', body = NULL, search = NULL, "
            "payload_digest = %(digest)s WHERE tenant = %(tenant)s AND workspace = %(workspace)s "
            "AND record_id = %(record)s) "
            "INSERT INTO tombstones (tenant, workspace, payload_digest) VALUES (%(tenant)s, %(workspace)s, %(digest)s) "
            "ON CONFLICT DO NOTHING",
            {"digest": keyed_digest, "tenant": scope.tenant, "workspace": scope.workspace, "record": record_id},
        )

    def consume_confirmation(self, nonce: str, at: str) -> bool:
        inserted = self.conn.execute(
            "INSERT INTO consumed_states (nonce, consumed_at) VALUES (%s, %s) ON CONFLICT DO NOTHING", (nonce, at)
        )
        return bool(inserted.rowcount == 1)

    def purge_confirmations(self, consumed_before: str) -> None:
        self.conn.execute("DELETE FROM consumed_states WHERE consumed_at < %s", (consumed_before,))

    def record_erasure(self, subject: Subject, scope: Scope, subject_id: str, cursor: int, at: str) -> int:
        row = self._one(
            "INSERT INTO erasures (tenant, subject, workspace, subject_id, cursor, requested_at, state) "
            "VALUES (%s, %s, %s, %s, %s, %s, 'pending') RETURNING erasure_id",
            (scope.tenant, subject, scope.workspace, subject_id, cursor, at),
        )
        assert row is not None  # RETURNING of a one-row INSERT
        return int(row["erasure_id"])

    def complete_erasures(self, erasure_ids: Sequence[int], at: str) -> None:
        self.conn.execute(
            "UPDATE erasures SET state = 'complete', completed_at = %s "
            "WHERE erasure_id = ANY(%s) AND state = 'pending'",
            (at, list(erasure_ids)),
        )

    def audit_append(self, row: AuditRow) -> int:
        # One statement: the next seq (past the last row and any checkpoint), the row, and its chain's count.
        added = self._one(
            "WITH added AS (INSERT INTO audit (seq, chain, entry, entry_hash, previous_hash) "
            "SELECT GREATEST((SELECT MAX(seq) FROM audit), (SELECT MAX(through_seq) FROM audit_checkpoints), 0) + 1, "
            "%s, %s, %s, %s RETURNING seq, chain), "
            "counted AS (INSERT INTO audit_counts (chain, held) SELECT chain, 1 FROM added "
            "ON CONFLICT (chain) DO UPDATE SET held = audit_counts.held + 1) "
            "SELECT seq FROM added",
            (row.chain, json.dumps(row.entry, sort_keys=True), row.entry_hash, row.previous_hash),
        )
        assert added is not None  # RETURNING of a one-row INSERT
        return int(added["seq"])

    def audit_compact(self, chain: Chain, rows: int) -> AuditCheckpoint | None:
        last = self._one(
            "SELECT seq, entry_hash FROM audit WHERE chain = %s ORDER BY seq LIMIT 1 OFFSET %s", (chain, rows - 1)
        )
        if last is None:
            return None
        removed = self.conn.execute("DELETE FROM audit WHERE chain = %s AND seq <= %s", (chain, last["seq"])).rowcount
        self.conn.execute("UPDATE audit_counts SET held = held - %s WHERE chain = %s", (removed, chain))
        before = self._one("SELECT rows_compacted FROM audit_checkpoints WHERE chain = %s", (chain,))
        checkpoint = AuditCheckpoint(
            chain, int(last["seq"]), last["entry_hash"], (int(before["rows_compacted"]) if before else 0) + removed
        )
        self.conn.execute(
            "INSERT INTO audit_checkpoints (chain, through_seq, entry_hash, rows_compacted) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (chain) DO UPDATE SET through_seq = excluded.through_seq, entry_hash = excluded.entry_hash, "
            "rows_compacted = excluded.rows_compacted",
            (checkpoint.chain, checkpoint.through_seq, checkpoint.entry_hash, checkpoint.rows_compacted),
        )
        return checkpoint
