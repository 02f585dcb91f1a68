"""The six operations, free of MCP: arguments in, an Outcome out.

The MCP edge has already checked the host binding, the grants, the purpose
and the arguments (schemas plus shared rules), and passed any confirmation
gate. What is left is the contract's lifecycle, idempotency, retention,
admission and visibility, against the store.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from engram_mcp.contract import (
    ZERO_DIGEST,
    canonical_bytes,
    load,
    payload_digest,
    profile_digest,
    receipt_digest,
    record_digest,
    record_id,
)
from engram_mcp.contract.binding import (
    BINDING_CLOCK_SKEW,
    CONFIRMATION_TTL_MAX,
    Binding,
    capture_candidate_id,
    idempotency_intent,
    journal_event_id,
    operation_target,
    scope_ref,
)
from engram_mcp.contract.validation import instant
from engram_mcp.reference import _search as search_index
from engram_mcp.reference._crypto import DigestKeyer, derive_key
from engram_mcp.reference._envelope import Outcome, Refusal
from engram_mcp.reference._periodic import Periodic
from engram_mcp.reference._ports import AdmissionDecision, AdmissionPolicy, CandidateView, Cipher, Scope, Sealed
from engram_mcp.reference._quotas import CallWindow, ResourceLimits, over
from engram_mcp.reference._store import Store, optimize_fts

# The reference's own admission rule, applied before the scope's policy: reject what no packet budget can serve.
UNREADABLE_POLICY_ID, UNREADABLE_POLICY_VERSION = "reference:readable-size", "1"
# Worst cases for the fields of a read that grow with the store: a cursor or a time at the largest safe integer.
_LARGEST_INTEGER = 2**53 - 1
EXPIRY_PRINCIPAL, EXPIRY_REASON = "server:expiry", "reason:pending-expired"  # who and why, in the journal
EXPIRY_BATCH = 256  # candidates shredded per sweep, so that a sweep never holds the store for long

log = logging.getLogger("engram_mcp.reference")

FORGETTABLE = ("accepted_current", "accepted_disputed", "historical", "expired", "trust_invalid")


@dataclass(frozen=True)
class ScopePolicy:
    """The host's policy for one scope, from the server configuration."""

    admission: AdmissionPolicy
    allow_retain: bool
    retention_ceiling: timedelta
    consented_families: frozenset[str]
    confirm_capture: bool
    confirm_admission: bool
    confirmation_ttl: timedelta


def epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def scope_of(binding: Binding) -> Scope:
    return Scope(binding.tenant, binding.workspace)


class Engine:
    def __init__(
        self,
        store: Store,
        cipher: Cipher,
        policies: Callable[[Scope], ScopePolicy],
        cursor_key: bytes,
        digest_key: bytes | None = None,
        limits: ResourceLimits | None = None,
    ) -> None:
        self.store = store
        self.limits = limits or ResourceLimits()
        self.calls = CallWindow(self.limits.quotas)
        self._housekeeping = Periodic(lambda: self.housekeeping(datetime.now(UTC)), name="housekeeping")
        self.cipher = cipher
        self.policy_for = policies
        self.cursors = search_index.CursorSealer(cursor_key)
        # Stored payload digests are keyed (see DigestKeyer); the server passes a subkey of the KEK.
        self.digests = DigestKeyer(digest_key or derive_key(cursor_key, "stored-digest"))
        self._key_stored_digests()
        self.contract = load()
        self._operations: dict[str, Callable[[Binding, dict[str, Any], datetime], dict[str, Any]]] = {
            "engram_memory_search": self._search,
            "engram_memory_get": self._get,
            "engram_memory_capture": self._capture,
            "engram_memory_request_admission": self._request_admission,
            "engram_memory_withdraw": self._withdraw,
            "engram_memory_forget": self._forget,
        }

    def call(self, tool: str, caller: Binding, arguments: dict[str, Any], now: datetime) -> Outcome:
        try:
            if self.contract.tools[tool].mutability != "read-only":
                self._sweep(now)
            return Outcome(value=self._operations[tool](caller, arguments, now))
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
        with self.store.write() as db:
            _purge_consumed(db, now)

    def admit_call(self, caller: Binding, now: datetime) -> bool:
        """Count one tool call against the call quotas; False (RATE_LIMITED, nothing counted) when over one."""
        return self.calls.admit(caller.tenant, caller.principal, now.timestamp())

    def replay(self, tool: str, caller: Binding, arguments: dict[str, Any]) -> Outcome | None:
        """A completed mutation's replay, or its conflict, before any gate is asked again."""
        with self.store.read() as db:
            try:
                value = self._reserved(db, tool, caller, arguments)
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
        now = now or datetime.now(UTC)
        with self.store.write() as db:
            _purge_consumed(db, now)
            try:
                db.execute("INSERT INTO consumed_states VALUES (?, ?)", (nonce, instant(now)))
            except sqlite3.IntegrityError:
                return False
        return True

    # -- idempotency -----------------------------------------------------

    def _reserved(
        self, db: sqlite3.Connection, tool: str, caller: Binding, arguments: dict[str, Any]
    ) -> dict[str, Any] | None:
        row = db.execute(
            "SELECT intent, value FROM reservations WHERE tenant = ? AND workspace = ? AND principal = ? AND "
            "idempotency_key = ?",
            (caller.tenant, caller.workspace, caller.principal, arguments["idempotency_key"]),
        ).fetchone()
        if row is None:
            return None
        if row["intent"] != _intent(tool, arguments, caller):
            raise Refusal("DIGEST_CONFLICT")
        return _as_replay(tool, json.loads(row["value"]))

    def _reserve(
        self, db: sqlite3.Connection, tool: str, caller: Binding, arguments: dict[str, Any], value: dict[str, Any]
    ) -> None:
        db.execute(
            "INSERT INTO reservations VALUES (?, ?, ?, ?, ?, ?)",
            (
                caller.tenant,
                caller.workspace,
                caller.principal,
                arguments["idempotency_key"],
                _intent(tool, arguments, caller),
                json.dumps(value, sort_keys=True),
            ),
        )

    # -- journal ----------------------------------------------------------

    def _append(self, db: sqlite3.Connection, scope: Scope, event: dict[str, Any]) -> tuple[int, str]:
        """Append a lifecycle event (no content) to the hash-chained journal; returns (cursor, event_digest)."""
        last = db.execute("SELECT cursor, event_hash FROM journal ORDER BY cursor DESC LIMIT 1").fetchone()
        cursor = (last["cursor"] if last else 0) + 1
        previous = last["event_hash"] if last else ZERO_DIGEST
        body = {**event, "cursor": str(cursor), "previous_event_hash": previous}
        event_hash = receipt_digest("memory-journal-event", body, "event_hash")
        db.execute(
            "INSERT INTO journal VALUES (?, ?, ?, ?, ?, ?)",
            (cursor, scope.tenant, scope.workspace, json.dumps(body, sort_keys=True), event_hash, previous),
        )
        return cursor, event_hash

    def _scope_snapshot(self, db: sqlite3.Connection, scope: Scope) -> int:
        row = db.execute(
            "SELECT MAX(cursor) FROM journal WHERE tenant = ? AND workspace = ?", (scope.tenant, scope.workspace)
        ).fetchone()
        return int(row[0] or 0)

    def _authorization(self, caller: Binding, tool: str) -> str:
        return profile_digest(
            "authorization",
            {"tool": tool, "tenant": caller.tenant, "workspace": caller.workspace,
             "principal": caller.principal, "binding": caller.token_id},
        )

    @staticmethod
    def _transaction(operation: str, cursor: int, event_digest: str, now: datetime, **extra: Any) -> str:
        return receipt_digest(
            "canonical-transaction",
            {
                "operation": operation,
                "cursor": str(cursor),
                "event_digest": event_digest,
                "committed_at": instant(now),
                **extra,
            },
        )

    # -- capture ------------------------------------------------------------

    def _capture(self, caller: Binding, args: dict[str, Any], now: datetime) -> dict[str, Any]:
        tool = "engram_memory_capture"
        policy = self.policy_for(scope_of(caller))
        with self.store.write() as db:
            replay = self._reserved(db, tool, caller, args)
            if replay is not None:
                return replay
            effective = self._effective_payload(caller, args["payload"], policy, now)
            self._within_quotas(db, caller, adding_bytes=0)  # the count first, before any sealing work
            cid = capture_candidate_id(caller, args["idempotency_key"])
            authorization = self._authorization(caller, tool)
            digest_of_payload = payload_digest(effective)
            cursor, event_digest = self._append(
                db, scope_of(caller),
                {"operation": "capture", "event_id": journal_event_id(caller, args["idempotency_key"]),
                 "candidate_id": cid, "to_state": "pending",
                 "recorded_at": instant(now), "authorization_receipt_digest": authorization},
            )
            record = self._record(effective, digest_of_payload, now, cursor, authorization)
            sealed = self.cipher.seal(
                canonical_bytes({"payload": effective, "evidence": args["evidence"], "record": record}),
                scope=scope_of(caller), candidate_id=cid,
            )
            self._within_quotas(db, caller, adding_bytes=len(sealed.ciphertext))  # a refusal rolls everything back
            db.execute(
                "INSERT INTO candidates (candidate_id, tenant, workspace, principal, state, record_id, payload_digest, "
                "created_cursor, ciphertext, wrapped_key, created_ms, body_bytes) "
                "VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?)",
                (
                    cid,
                    caller.tenant,
                    caller.workspace,
                    caller.principal,
                    record["record_id"],
                    self.digests.stored(digest_of_payload, scope_of(caller)),
                    cursor,
                    sealed.ciphertext,
                    sealed.wrapped_key,
                    epoch_ms(now),
                    len(sealed.ciphertext),
                ),
            )
            value = {
                "status": "committed_pending",
                "candidate_id": cid,
                "record_digest": record["record_digest"],
                "cursor": str(cursor),
                "transaction_receipt_digest": self._transaction(
                    "capture", cursor, event_digest, now, record_digest=record["record_digest"]
                ),
            }
            self._reserve(db, tool, caller, args, value)
        return value

    def _within_quotas(self, db: sqlite3.Connection, caller: Binding, *, adding_bytes: int) -> None:
        """RATE_LIMITED when one more pending candidate, of ``adding_bytes``, would pass a tenant or principal quota.

        Bytes held are the sealed bytes of the holder's candidates that are pending,
        or admitted and not forgotten.
        """
        quotas = self.limits.quotas
        for bound, principal in ((quotas.tenant, None), (quotas.principal, caller.principal)):
            if not (bound.pending_candidates or bound.bytes):
                continue
            holder = "c.tenant = ?" + (" AND c.principal = ?" if principal is not None else "")
            params = (caller.tenant, *((principal,) if principal is not None else ()))
            row = db.execute(
                "SELECT COALESCE(SUM(c.state = 'pending'), 0) AS pending, COALESCE(SUM(c.body_bytes), 0) AS held "
                "FROM candidates c LEFT JOIN records r "
                "ON r.tenant = c.tenant AND r.workspace = c.workspace AND r.record_id = c.record_id "
                f"WHERE {holder} AND c.state IN ('pending', 'accepted') AND (c.state = 'pending' OR r.state = "
                "'accepted_current')",
                params,
            ).fetchone()
            if over(row["pending"], 1, bound.pending_candidates) or over(row["held"], adding_bytes, bound.bytes):
                raise Refusal("RATE_LIMITED")

    def _effective_payload(
        self, caller: Binding, payload: dict[str, Any], policy: ScopePolicy, now: datetime
    ) -> dict[str, Any]:
        """The payload as stored: scope bound, retention resolved, host policy applied."""
        retention = dict(payload.get("retention", {"derivative_rule": "make-ineligible"}))
        if retention["derivative_rule"] == "retain" and not policy.allow_retain:
            raise Refusal("UNAUTHORIZED")
        if "expires_at" in retention and retention["expires_at"] > instant(now + policy.retention_ceiling):
            raise Refusal("UNAUTHORIZED")
        families = payload.get("reconciliation", {"family_refs": []})["family_refs"]
        if not set(families) <= policy.consented_families:
            raise Refusal("UNAUTHORIZED")
        return {
            **payload,
            "scope_ref": scope_ref(caller),
            "retention": retention,
            "reconciliation": {"family_refs": families},
        }

    @staticmethod
    def _record(
        effective: dict[str, Any], digest_of_payload: str, now: datetime, cursor: int, authorization: str
    ) -> dict[str, Any]:
        """The record admission would create; its digest and id are fixed at capture."""
        trust = {
            "class": "asserted", "evidence_digest": digest_of_payload, "verifier_id": "reference:asserted",
            "verifier_version": "1", "issued_at": instant(now), "revocation_epoch": "0",
        }
        trust["receipt_digest"] = receipt_digest("asserted-trust", trust)
        record = {
            **effective,
            "payload_digest": digest_of_payload,
            "recorded_at": instant(now),
            "recorded_cursor": str(cursor),
            "authorization_receipt_digest": authorization,
            "trust": trust,
        }
        record["record_digest"] = record_digest(record)
        record["record_id"] = record_id(record["record_digest"])
        return record

    # -- candidates: admission and withdrawal -------------------------------------

    def _candidate(self, db: sqlite3.Connection, caller: Binding, cid: str) -> sqlite3.Row:
        """The candidate, if the caller may act on it; NOT_FOUND through one path otherwise."""
        row = db.execute(
            "SELECT c.*, r.state AS record_state FROM candidates c "
            "LEFT JOIN records r ON r.tenant = c.tenant AND r.workspace = c.workspace AND r.record_id = c.record_id "
            "WHERE c.tenant = ? AND c.workspace = ? AND c.candidate_id = ?",
            (caller.tenant, caller.workspace, cid),
        ).fetchone()
        visible = row is not None and (
            row["state"] == "pending" or (row["state"] == "accepted" and row["record_state"] != "tombstoned")
        )
        if not visible:
            raise Refusal("NOT_FOUND")
        return row

    def _request_admission(self, caller: Binding, args: dict[str, Any], now: datetime) -> dict[str, Any]:
        tool = "engram_memory_request_admission"
        policy = self.policy_for(scope_of(caller))
        with self.store.write() as db:
            replay = self._reserved(db, tool, caller, args)
            if replay is not None:
                return replay
            row = self._candidate(db, caller, args["candidate_id"])
            if row["state"] == "pending" and self._past_expiry(row, now):
                raise Refusal("NOT_FOUND")  # expired: the sweep shreds it like a withdraw
            if row["state"] == "accepted":
                raise Refusal("ALREADY_TERMINAL")
            opened = json.loads(
                self.cipher.open(
                    Sealed(row["ciphertext"], row["wrapped_key"]),
                    scope=scope_of(caller),
                    candidate_id=row["candidate_id"],
                )
            )
            if self._readable_at_largest_budget(caller, opened["record"], now):
                decision = policy.admission.decide(
                    CandidateView(payload=opened["payload"], evidence=opened["evidence"])
                )
            else:  # a record no budget could serve is never admitted (EMC-GET-006)
                decision = AdmissionDecision("reject", UNREADABLE_POLICY_ID, UNREADABLE_POLICY_VERSION)
            status = {"accept": "accepted", "reject": "rejected", "adjudicate": "pending_adjudication"}[
                decision.decision
            ]
            if status == "accepted" and db.execute(
                "SELECT 1 FROM tombstones WHERE tenant = ? AND workspace = ? AND payload_digest = ?",
                (caller.tenant, caller.workspace, row["payload_digest"]),
            ).fetchone():
                status = "pending_adjudication"  # forgotten content is never re-admitted silently
            record = opened["record"]
            decision_digest = receipt_digest(
                "admission-decision",
                {"policy_id": decision.policy_id, "policy_version": decision.policy_version,
                 "record_digest": record["record_digest"], "decision": decision.decision, "issued_at": instant(now)},
            )
            outcome: dict[str, Any] = {"status": status, "candidate_id": row["candidate_id"]}
            if status == "pending_adjudication":
                cursor = row["created_cursor"]
                transaction = receipt_digest(
                    "admission-pending",
                    {
                        "candidate_id": row["candidate_id"],
                        "cursor": str(cursor),
                        "decision_receipt_digest": decision_digest,
                    },
                )
            else:
                cursor, event_digest = self._append(
                    db, scope_of(caller),
                    {"operation": "accept" if status == "accepted" else "reject",
                     "event_id": journal_event_id(caller, args["idempotency_key"]), "candidate_id": row["candidate_id"],
                     **({"record_id": record["record_id"]} if status == "accepted" else {}), "from_state": "pending",
                     "to_state": "accepted_current" if status == "accepted" else "rejected",
                     "recorded_at": instant(now), "authorization_receipt_digest": self._authorization(caller, tool)},
                )
                transaction = self._transaction(status, cursor, event_digest, now)
                if status == "accepted":
                    self._admit(db, scope_of(caller), row["candidate_id"], record, cursor)
                    outcome["record_id"] = record["record_id"]
                # Once the candidate leaves pending its key and sealed body are destroyed.
                db.execute(
                    "UPDATE candidates SET state = ?, ciphertext = NULL, wrapped_key = NULL "
                    "WHERE tenant = ? AND workspace = ? AND candidate_id = ?",
                    (status, caller.tenant, caller.workspace, row["candidate_id"]),
                )
                if status == "rejected":  # refused content leaves the WAL too; the ledger settles it in the background
                    self.store.erasures.record(
                        db, "candidate_key", caller.tenant, caller.workspace, row["candidate_id"], cursor
                    )
            outcome.update(
                cursor=str(cursor), decision_receipt_digest=decision_digest, transaction_receipt_digest=transaction
            )
            value = {"outcome": outcome, "replayed": False}
            self._reserve(db, tool, caller, args, value)
        return value

    def _admit(self, db: sqlite3.Connection, scope: Scope, cid: str, record: dict[str, Any], cursor: int) -> None:
        valid_time = record["valid_time"]
        rowid = db.execute(
            "INSERT INTO records (record_id, tenant, workspace, candidate_id, state, body, payload_digest, "
            "valid_from, valid_to, expires_at, recorded_cursor) VALUES (?, ?, ?, ?, 'accepted_current', ?, ?, ?, "
            "?, ?, ?)",
            (
                record["record_id"],
                scope.tenant,
                scope.workspace,
                cid,
                json.dumps(record, ensure_ascii=False),
                record["payload_digest"],
                valid_time["t"],
                valid_time.get("t_end"),
                record["retention"].get("expires_at"),
                cursor,
            ),
        ).lastrowid
        db.execute(search_index.create_table_sql(scope))
        placeholders = ", ".join("?" for _ in search_index.FIELDS)
        db.execute(
            f"INSERT INTO {search_index.fts_table(scope)} (rowid, {', '.join(search_index.FIELDS)}) VALUES (?, "
            f"{placeholders})",
            (rowid, *search_index.field_texts(record)),
        )

    def _withdraw(self, caller: Binding, args: dict[str, Any], now: datetime) -> dict[str, Any]:
        tool = "engram_memory_withdraw"
        with self.store.write() as db:
            replay = self._reserved(db, tool, caller, args)
            if replay is not None:
                return replay
            row = self._candidate(db, caller, args["candidate_id"])
            if row["state"] != "pending":
                raise Refusal("ILLEGAL_TRANSITION")  # an admitted candidate is forgotten, not withdrawn
            authorization = self._authorization(caller, tool)
            event_id = journal_event_id(caller, args["idempotency_key"])
            cursor, event_digest = self._append(
                db, scope_of(caller),
                {"operation": "withdraw", "event_id": event_id, "candidate_id": row["candidate_id"],
                 "from_state": "pending", "to_state": "withdrawn", "reason_ref": args["reason_ref"],
                 "recorded_at": instant(now), "authorization_receipt_digest": authorization},
            )
            erasure = self._shred_candidate(db, scope_of(caller), row, cursor)
            value = {
                "receipt": {
                    "event_id": event_id, "operation": "withdraw", "from_state": "pending", "to_state": "withdrawn",
                    "cursor": str(cursor), "event_digest": event_digest, "authorization_receipt_digest": authorization,
                    "transaction_receipt_digest": self._transaction("withdraw", cursor, event_digest, now),
                },
                "replayed": False,
                "key_destruction": "pending",  # until no store file holds the wrapped key or the ciphertext
            }
            self._reserve(db, tool, caller, args, value)
        return self._conclude_erasure(caller, args, value, "key_destruction", erasure)

    def _shred_candidate(self, db: sqlite3.Connection, scope: Scope, row: sqlite3.Row, cursor: int) -> int:
        """Withdraw a pending candidate: destroy its wrapped key and sealed body, key its digest, queue the erasure.

        Shared by withdraw and by expiry, so both erase the same way; returns the erasure's id.
        """
        db.execute(
            "UPDATE candidates SET state = 'withdrawn', ciphertext = NULL, wrapped_key = NULL, payload_digest = ? "
            "WHERE tenant = ? AND workspace = ? AND candidate_id = ?",
            (self.digests.stored(row["payload_digest"], scope), scope.tenant, scope.workspace, row["candidate_id"]),
        )
        return self.store.erasures.record(
            db, "candidate_key", scope.tenant, scope.workspace, row["candidate_id"], cursor
        )

    # -- expiry of pending candidates ---------------------------------------------------

    def _past_expiry(self, row: sqlite3.Row, now: datetime) -> bool:
        created = row["created_ms"]
        return created is not None and created <= epoch_ms(now) - 1000 * self.limits.expiry.pending_candidate_seconds

    def _sweep(self, now: datetime) -> None:
        """Expire what is due before a mutation; a failed sweep is left to the next one, never the caller's failure."""
        try:
            self.expire_pending(now)
        except sqlite3.Error:
            log.exception("expired pending candidates could not be swept")

    def expire_pending(self, now: datetime) -> int:
        """Shred, like a withdraw, the oldest pending candidates past their lifetime (one batch); how many.

        Each gets a journal event (pending to withdrawn, reason ``reason:pending-expired``)
        and an erasure that the store settles in the background.
        """
        cutoff = epoch_ms(now) - 1000 * self.limits.expiry.pending_candidate_seconds
        with self.store.read() as db:
            due = db.execute(
                "SELECT 1 FROM candidates WHERE state = 'pending' AND created_ms <= ? LIMIT 1", (cutoff,)
            ).fetchone()
        if due is None:
            return 0
        with self.store.write() as db:
            rows = db.execute(
                "SELECT * FROM candidates WHERE state = 'pending' AND created_ms <= ? ORDER BY created_ms LIMIT ?",
                (cutoff, EXPIRY_BATCH),
            ).fetchall()
            for row in rows:
                scope = Scope(row["tenant"], row["workspace"])
                # The server acts as its own principal; the candidate id stands for an idempotency key.
                server = Binding(
                    scope.tenant,
                    scope.workspace,
                    EXPIRY_PRINCIPAL,
                    EXPIRY_PRINCIPAL,
                    "",
                    "",
                    "",
                    "",
                    0,
                    0,
                    token_id=f"expiry:{row['candidate_id']}",
                )
                cursor, _ = self._append(
                    db, scope,
                    {"operation": "withdraw", "event_id": journal_event_id(server, server.token_id),
                     "candidate_id": row["candidate_id"], "from_state": "pending", "to_state": "withdrawn",
                     "reason_ref": EXPIRY_REASON, "recorded_at": instant(now),
                     "authorization_receipt_digest": self._authorization(server, "expiry")},
                )
                self._shred_candidate(db, scope, row, cursor)
        return len(rows)

    def _conclude_erasure(
        self, caller: Binding, args: dict[str, Any], value: dict[str, Any], field: str, erasure: int
    ) -> dict[str, Any]:
        """The erasure's answer: `complete` only once the store's flush has covered it, else the reserved `pending`.

        The flush waits briefly for other readers and never under the store's lock.
        When it succeeds, the reservation is updated in the same transaction that
        confirms completion, so a replay answers exactly what this call answers.
        """
        try:
            self.store.erasures.settle()
            with self.store.write() as db:
                if not self.store.erasures.is_complete(db, erasure):
                    return value
                done = {**value, field: "complete"}
                db.execute(
                    "UPDATE reservations SET value = ? WHERE tenant = ? AND workspace = ? AND principal = ? AND "
                    "idempotency_key = ?",
                    (
                        json.dumps(done, sort_keys=True),
                        caller.tenant,
                        caller.workspace,
                        caller.principal,
                        args["idempotency_key"],
                    ),
                )
            return done
        except sqlite3.Error:  # the erasure is committed and queued; the background retry finishes it
            return value

    def _key_stored_digests(self) -> None:
        """Key, once per store, the plain payload digests an older server left in erased or sealed rows."""
        with self.store.write() as db:
            if db.execute("SELECT 1 FROM meta WHERE key = 'stored_digests'").fetchone():
                return
            for table, erased in (("candidates", ""), ("records", " AND state = 'tombstoned'"), ("tombstones", "")):
                rows = db.execute(
                    f"SELECT rowid, tenant, workspace, payload_digest FROM {table} WHERE payload_digest NOT LIKE "
                    f"'hmac-%'{erased}"
                ).fetchall()
                db.executemany(
                    f"UPDATE OR IGNORE {table} SET payload_digest = ? WHERE rowid = ?",
                    [
                        (self.digests.stored(r["payload_digest"], Scope(r["tenant"], r["workspace"])), r["rowid"])
                        for r in rows
                    ],
                )
            db.execute("INSERT INTO meta VALUES ('stored_digests', 'hmac-sha256')")

    # -- records: forget, get, search ------------------------------------------

    def _visible_record(self, db: sqlite3.Connection, caller: Binding, rid: str, now: datetime) -> sqlite3.Row:
        """A record the caller may read now; NOT_FOUND through one path otherwise."""
        row = db.execute(
            "SELECT * FROM records WHERE tenant = ? AND workspace = ? AND record_id = ?",
            (caller.tenant, caller.workspace, rid),
        ).fetchone()
        if row is None or not _current(row, now):
            raise Refusal("NOT_FOUND")
        return row

    def _forget(self, caller: Binding, args: dict[str, Any], now: datetime) -> dict[str, Any]:
        tool = "engram_memory_forget"
        with self.store.write() as db:
            replay = self._reserved(db, tool, caller, args)
            if replay is not None:
                return replay
            row = db.execute(
                "SELECT * FROM records WHERE tenant = ? AND workspace = ? AND record_id = ? AND state = "
                "'accepted_current'",
                (caller.tenant, caller.workspace, args["record_id"]),
            ).fetchone()
            if row is None:
                raise Refusal("NOT_FOUND")
            from_state = "expired" if _expired(row, now) else "accepted_current"
            authorization = self._authorization(caller, tool)
            event_id = journal_event_id(caller, args["idempotency_key"])
            cursor, event_digest = self._append(
                db, scope_of(caller),
                {"operation": "tombstone", "event_id": event_id, "record_id": row["record_id"],
                 "from_state": from_state, "to_state": "tombstoned", "reason_ref": args["reason_ref"],
                 "recorded_at": instant(now), "authorization_receipt_digest": authorization},
            )
            fts = search_index.fts_table(scope_of(caller))
            db.execute(f"DELETE FROM {fts} WHERE rowid = ?", (row["rowid"],))
            optimize_fts(db, fts)  # in the same transaction: the live index never holds the text after commit
            keyed = self.digests.stored(row["payload_digest"], scope_of(caller))
            db.execute(
                "UPDATE records SET state = 'tombstoned', body = NULL, payload_digest = ? WHERE rowid = ?",
                (keyed, row["rowid"]),
            )
            db.execute("INSERT OR IGNORE INTO tombstones VALUES (?, ?, ?)", (caller.tenant, caller.workspace, keyed))
            erasure = self.store.erasures.record(
                db, "record_content", caller.tenant, caller.workspace, row["record_id"], cursor
            )
            value = {
                "receipt": {
                    "event_id": event_id,
                    "operation": "tombstone",
                    "from_state": from_state,
                    "to_state": "tombstoned",
                    "cursor": str(cursor),
                    "event_digest": event_digest,
                    "authorization_receipt_digest": authorization,
                    "transaction_receipt_digest": self._transaction("tombstone", cursor, event_digest, now),
                },
                "replayed": False,
                "projection_invalidation": "pending",  # until no store file holds the text
                "coverage_receipt_digest": profile_digest(
                    "forget-coverage",
                    {
                        "record_id": row["record_id"],
                        "cursor": str(cursor),
                        "surfaces": ["records", "search_index", "wal"],
                    },
                ),
            }
            self._reserve(db, tool, caller, args, value)
        return self._conclude_erasure(caller, args, value, "projection_invalidation", erasure)

    def _packet(self, row: sqlite3.Row) -> dict[str, Any]:
        return self._packet_of(json.loads(row["body"]))

    @staticmethod
    def _packet_of(record: dict[str, Any]) -> dict[str, Any]:
        record = dict(record)
        redacted = ["/scope_ref"]  # the bound scope is the host's, never the agent's
        for pointer in redacted:
            record.pop(pointer[1:], None)
        redaction = receipt_digest(
            "recall-redaction",
            {
                "record_id": record["record_id"],
                "source_record_digest": record["record_digest"],
                "policy_version": "1",
                "redacted_fields": redacted,
            },
            "redaction_receipt_digest",
        )
        return {"record": record, "redacted_fields": redacted, "redaction_receipt_digest": redaction}

    def _readable_at_largest_budget(self, caller: Binding, record: dict[str, Any], now: datetime) -> bool:
        """Whether get, and a search page holding it alone, can serve this record at max_packet_bytes.max.

        Both values are built as they would be, with every field that grows with
        the store (cursors, times, ranks, counts) at its largest value.
        """
        largest = self.contract.limit("max_packet_bytes.max")
        packet = self._packet_of(record)
        if _size(self._get_value(caller, packet, now, _LARGEST_INTEGER, _LARGEST_INTEGER)) > largest:
            return False
        worst = _PageContext(
            query="", purpose_ref=caller.purpose_ref, limit=self.contract.limit("search.limit.max"), budget=largest,
            capability=DEFAULT_CAPABILITY, snapshot=_LARGEST_INTEGER, valid_as_of=_LARGEST_INTEGER,
            ranked_ids=[record["record_id"]] * search_index.MAX_CANDIDATES, ordered_digest=ZERO_DIGEST,
            page_request=ZERO_DIGEST, now=now,
        )
        entry = {**packet, "score": _LONGEST_SCORE, "rank": search_index.MAX_CANDIDATES}
        return _size(self._page_value(caller, worst, [entry], search_index.MAX_CANDIDATES)) <= largest

    def _get_value(
        self, caller: Binding, packet: dict[str, Any], now: datetime, snapshot: int, valid_as_of: int
    ) -> dict[str, Any]:
        authorization = self._authorization(caller, "engram_memory_get")
        read_receipt = {
            "record_id": packet["record"]["record_id"],
            "record_digest": packet["record"]["record_digest"],
            "valid_as_of": valid_as_of,
            "system_as_of": str(snapshot),
            "validated_through_cursor": str(snapshot),
            "authorization_receipt_digest": authorization,
            "revalidation_receipt_digest": receipt_digest(
                "authorization-revalidation",
                {
                    "record_ids": [packet["record"]["record_id"]],
                    "valid_as_of": valid_as_of,
                    "system_as_of": str(snapshot),
                },
                "revalidation_receipt_digest",
            ),
            "checked_at": instant(now),
        }
        read_receipt["receipt_digest"] = profile_digest("read-receipt", read_receipt)
        value = {**packet, "read_receipt": read_receipt}
        value["packet_digest"] = profile_digest("get-packet", value)
        return value

    def _get(self, caller: Binding, args: dict[str, Any], now: datetime) -> dict[str, Any]:
        budget = args.get("max_packet_bytes", self.contract.limit("max_packet_bytes.default"))
        with self.store.read() as db:
            row = self._visible_record(db, caller, args["record_id"], now)
            snapshot = self._scope_snapshot(db, scope_of(caller))
        value = self._get_value(caller, self._packet(row), now, snapshot, epoch_ms(now))
        if _size(value) > budget:
            raise Refusal("PROJECTION_OVERSIZED")
        return value

    def _search(self, caller: Binding, args: dict[str, Any], now: datetime) -> dict[str, Any]:
        capability = args.get("capability_policy", DEFAULT_CAPABILITY)
        if capability["minimum_channels"] != "lexical":
            raise Refusal("RANKING_UNAVAILABLE")  # no semantic channel here, and no silent fallback
        limit = args.get("limit", self.contract.limit("search.limit.default"))
        budget = args.get("max_packet_bytes", self.contract.limit("max_packet_bytes.default"))
        page_request = search_index.page_request_digest(
            caller, args["query"], args["purpose_ref"], limit, budget, capability
        )
        with self.store.read() as db:
            snapshot = self._scope_snapshot(db, scope_of(caller))
            pinned = None
            if "page_cursor" in args:
                pinned = self.cursors.open(args["page_cursor"])
                if pinned is None or (pinned.request, pinned.system_as_of) != (page_request, snapshot):
                    raise Refusal("STALE_PAGE")
                offset, valid_as_of = pinned.offset, pinned.valid_as_of
            else:
                offset, valid_as_of = 0, epoch_ms(now)
            ranked = self._ranked(db, scope_of(caller), args["query"], valid_as_of)
            ranked_ids = [r["record_id"] for r in ranked]
            ordered_digest = receipt_digest("recall-ordered", {"ordered_ids": ranked_ids}, "ordered_ids_digest")
            if pinned is not None and pinned.ordered_ids_digest != ordered_digest:
                raise Refusal("STALE_PAGE")
            context = _PageContext(
                query=args["query"],
                purpose_ref=args["purpose_ref"],
                limit=limit,
                budget=budget,
                capability=capability,
                snapshot=snapshot,
                valid_as_of=valid_as_of,
                ranked_ids=ranked_ids,
                ordered_digest=ordered_digest,
                page_request=page_request,
                now=now,
            )
            return self._fill_page(db, caller, context, [r["rowid"] for r in ranked], offset)

    def _fill_page(
        self, db: sqlite3.Connection, caller: Binding, context: _PageContext, rowids: list[int], offset: int
    ) -> dict[str, Any]:
        """The page from ``offset``: as many records as the limit and the budget allow, in rank order.

        The budget covers the whole value. A packet fits when the value with it stays
        within budget, counting a cursor only if records would remain after it. A
        record whose packet could not fit even alone is left out, its rank skipped,
        so it never hides the records after it (EMC-SRCH-013); a larger budget serves
        it. Only when no remaining match fits is the search PROJECTION_OVERSIZED.
        """
        if offset >= len(rowids):
            return self._page_value(caller, context, [], None)  # nothing matched: the one empty success
        budget = context.budget
        bare = _size(self._page_value(caller, context, [], None))
        cursor_cost = _size(self._page_value(caller, context, [], len(rowids))) - bare
        packets: list[dict[str, Any]] = []
        used, position = bare, offset

        def fits_alone(packet: dict[str, Any], at: int) -> bool:
            return bare + _size(packet) + (cursor_cost if at + 1 < len(rowids) else 0) <= budget

        def entry(at: int) -> dict[str, Any]:
            return {
                **self._packet(self._row(db, rowids[at])),
                "score": search_index.fused_score(at + 1),
                "rank": at + 1,
            }

        while position < len(rowids) and len(packets) < context.limit:
            packet = entry(position)
            size = _size(packet) + (1 if packets else 0)
            if used + size + (cursor_cost if position + 1 < len(rowids) else 0) <= budget:
                packets.append(packet)
                used += size
            elif fits_alone(packet, position):
                break  # the next page starts with it
            position += 1
        # A cursor is given only if a record that can be served remains: skip the oversized ones now.
        while position < len(rowids) and not fits_alone(entry(position), position):
            position += 1
        if not packets:
            raise Refusal("PROJECTION_OVERSIZED")  # never an empty page, with or without a cursor
        next_offset = position if position < len(rowids) else None
        value = self._page_value(caller, context, packets, next_offset)
        while _size(value) > budget and len(packets) > 1:  # a longer cursor offset can cost a digit
            next_offset = packets.pop()["rank"] - 1
            value = self._page_value(caller, context, packets, next_offset)
        return value

    def _page_value(
        self, caller: Binding, context: _PageContext, packets: list[dict[str, Any]], next_offset: int | None
    ) -> dict[str, Any]:
        value: dict[str, Any] = {
            "records": packets,
            "rank_receipt": self._rank_receipt(caller, context, [p["record"]["record_id"] for p in packets]),
        }
        if next_offset is not None:
            value["next_page_cursor"] = self.cursors.seal(
                search_index.PageCursor(
                    context.page_request,
                    search_index.PROFILE,
                    context.valid_as_of,
                    context.snapshot,
                    next_offset,
                    context.ordered_digest,
                )
            )
        value["response_digest"] = profile_digest("search-response", value)
        return value

    @staticmethod
    def _row(db: sqlite3.Connection, rowid: int) -> sqlite3.Row:
        return db.execute("SELECT * FROM records WHERE rowid = ?", (rowid,)).fetchone()

    def _ranked(self, db: sqlite3.Connection, scope: Scope, query: str, valid_as_of: int) -> list[sqlite3.Row]:
        """Current matches in the scope's own index, best first, at most MAX_CANDIDATES."""
        tokens = search_index.query_tokens(query)
        table = search_index.fts_table(scope)
        if not tokens or not db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
            return []
        weights = ", ".join(str(w) for w in search_index.FIELD_WEIGHTS)
        return db.execute(
            f"SELECT r.rowid, r.record_id FROM {table} f JOIN records r ON r.rowid = f.rowid "
            f"WHERE {table} MATCH ? AND r.state = 'accepted_current' "
            "AND r.valid_from <= ? AND (r.valid_to IS NULL OR r.valid_to >= ?) "
            "AND (r.expires_at IS NULL OR r.expires_at > ?) "
            f"ORDER BY bm25({table}, {weights}), r.record_id LIMIT ?",
            (search_index.match_expression(tokens), valid_as_of, valid_as_of, _instant_ms(valid_as_of),
             search_index.MAX_CANDIDATES),
        ).fetchall()

    def _rank_receipt(self, caller: Binding, context: _PageContext, page_ids: list[str]) -> dict[str, Any]:
        request = {
            "query": context.query,
            "purpose_ref": context.purpose_ref,
            "profile": search_index.PROFILE,
            "valid_as_of": context.valid_as_of,
            "system_as_of": str(context.snapshot),
            "capability_policy": context.capability,
            "budgets": {
                "max_candidates": search_index.MAX_CANDIDATES,
                "max_results": context.limit,
                "max_packet_bytes": context.budget,
            },
        }
        receipt = {
            "request_digest": receipt_digest("recall-request", request, "request_digest"),
            "authorization_receipt_digest": self._authorization(caller, "engram_memory_search"),
            "profile": search_index.PROFILE,
            "profile_version": search_index.PROFILE_VERSION,
            "profile_config_digest": search_index.profile_config_digest(),
            "valid_as_of": context.valid_as_of,
            "system_as_of": str(context.snapshot),
            "snapshot_id": f"scope-snapshot-{context.snapshot}",
            "snapshot_digest": profile_digest(
                "snapshot", {"scope": scope_ref(caller), "system_as_of": str(context.snapshot)}
            ),
            "candidate_count": len(context.ranked_ids),
            "candidate_ids_digest": context.candidate_ids_digest,
            "scoring_formula_ref": search_index.SCORING_FORMULA,
            "ordered_ids_digest": context.ordered_digest,
            "revalidation_receipt_digest": receipt_digest(
                "authorization-revalidation",
                {"record_ids": page_ids, "valid_as_of": context.valid_as_of, "system_as_of": str(context.snapshot)},
                "revalidation_receipt_digest",
            ),
            "projection_receipt_digests": [],
            "issued_at": instant(context.now),
        }
        receipt["receipt_digest"] = receipt_digest("rank-receipt", receipt)
        return receipt


DEFAULT_CAPABILITY = {"minimum_channels": "lexical", "network": "forbid"}
_LONGEST_SCORE = 0.12345678901234568  # a score with as many digits as a float can print


@dataclass(frozen=True)
class _PageContext:
    """What one search request fixes for every page value built while answering it."""

    query: str
    purpose_ref: str
    limit: int
    budget: int
    capability: dict[str, str]
    snapshot: int
    valid_as_of: int
    ranked_ids: list[str]
    ordered_digest: str
    page_request: str
    now: datetime

    @cached_property
    def candidate_ids_digest(self) -> str:
        return receipt_digest("recall-candidates", {"candidate_ids": sorted(self.ranked_ids)}, "candidate_ids_digest")


def _purge_consumed(db: sqlite3.Connection, now: datetime) -> None:
    """Delete the consumed states that can no longer be replayed (see ``Engine.consume_state``)."""
    # A host reference may be approved up to the skew ahead of the clock and honoured up to the skew past its
    # expiry, so its id must outlive the TTL by twice the skew.
    horizon = instant(now - timedelta(seconds=CONFIRMATION_TTL_MAX + 2 * BINDING_CLOCK_SKEW))
    db.execute("DELETE FROM consumed_states WHERE consumed_at < ?", (horizon,))


def _size(value: Any) -> int:
    """Bytes a value counts against max_packet_bytes: its canonical form, as sent."""
    return len(canonical_bytes(value, normalize=False))


def _instant_ms(ms: int) -> str:
    return instant(datetime.fromtimestamp(ms / 1000, UTC))


def _expired(row: sqlite3.Row, now: datetime) -> bool:
    return row["expires_at"] is not None and row["expires_at"] <= instant(now)


def _current(row: sqlite3.Row, now: datetime) -> bool:
    ms = epoch_ms(now)
    return (
        row["state"] == "accepted_current"
        and row["valid_from"] <= ms
        and (row["valid_to"] is None or ms <= row["valid_to"])
        and not _expired(row, now)
    )


def _intent(tool: str, arguments: dict[str, Any], caller: Binding) -> str:
    return idempotency_intent(tool, operation_target(tool, arguments), arguments, caller)


def _as_replay(tool: str, value: dict[str, Any]) -> dict[str, Any]:
    """The stored value as a retry sees it: duplicate_exact for capture, replayed elsewhere."""
    if tool == "engram_memory_capture":
        return {**value, "status": "duplicate_exact"}
    return {**value, "replayed": True}
