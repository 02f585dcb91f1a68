"""The lifecycle: capture, admission, withdraw, forget and the expiry of pending candidates.

Every mutation runs through ``Lifecycle.mutate``, one unit of work that checks
the idempotency reservation (a replay answers the stored value), applies the
change, reserves the answer and writes the call's audit row, all committed
together or not at all.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from engram_mcp.contract import (
    canonical_bytes,
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
    journal_event_id,
    scope_ref,
)
from engram_mcp.contract.validation import instant
from engram_mcp.reference._call import UnitHooks
from engram_mcp.reference._crypto import DigestKeyer
from engram_mcp.reference._envelope import Refusal
from engram_mcp.reference._journal import append_event, authorization, reserve, reserved, scope_of, transaction_receipt
from engram_mcp.reference._ledger_bytes import Metered
from engram_mcp.reference._policy import ScopePolicy
from engram_mcp.reference._ports import (
    AdmissionDecision,
    CandidateView,
    Cipher,
    MemoryStore,
    NewCandidate,
    Scope,
    StoredCandidate,
    StoreReader,
    StoreTransaction,
)
from engram_mcp.reference._quotas import ResourceLimits, over
from engram_mcp.reference._recall import epoch_ms, expired

# The reference's own admission rule, applied before the scope's policy: reject what no packet budget can serve.
UNREADABLE_POLICY_ID, UNREADABLE_POLICY_VERSION = "reference:readable-size", "1"
EXPIRY_PRINCIPAL, EXPIRY_REASON = "server:expiry", "reason:pending-expired"  # who and why, in the journal
EXPIRY_BATCH = 256  # candidates shredded per sweep, so that a sweep never holds the store for long

log = logging.getLogger("engram_mcp.reference")

# A change: the value to answer and reserve, and the erasure it queued (if any), from inside the unit of work.
Change = Callable[[StoreTransaction], tuple[dict[str, Any], int | None]]


class Lifecycle:
    def __init__(
        self,
        store: MemoryStore,
        cipher: Cipher,
        policies: Callable[[Scope], ScopePolicy],
        digests: DigestKeyer,
        limits: ResourceLimits,
        readable: Callable[[Binding, dict[str, Any], datetime], bool],
    ) -> None:
        self.store = store
        self.cipher = cipher
        self.policy_for = policies
        self.digests = digests
        self.limits = limits
        self.readable = readable  # whether a record could be served at the largest packet budget
        self.quiet = QuietWindow()  # until when no pending candidate can be due: the sweep before a mutation waits

    # -- the one mutation wrapper ------------------------------------------------------------

    def mutate(
        self, tool: str, caller: Binding, args: dict[str, Any], change: Change, hooks: UnitHooks | None = None
    ) -> tuple[dict[str, Any], int | None]:
        """Replay or apply ``change`` under the caller's idempotency key, in one unit of work with its audit row.

        ``hooks`` is the call being served: its last word is asked at the top of the unit, once the store's lock
        is held (a cancellation, deadline or execution window that passed while the call waited for the lock
        refuses there, and the unit rolls back: EMC-HP-055, EMC-HP-056, EMC-HP-066); its audit row is written
        inside the unit."""

        def unit(store_tx: StoreTransaction) -> tuple[dict[str, Any], int | None]:
            if hooks is not None:
                hooks.last_word()
            metered = Metered(store_tx)
            tx = metered.tx
            replay = self.replay_of(tx, tool, caller, args)
            if replay is not None:
                outcome: tuple[dict[str, Any], int | None] = (replay, None)
            else:
                outcome = change(tx)
                reserve(tx, tool, caller, args, outcome[0])
            if hooks is not None:
                hooks.write_audit(tx)
            if metered.written:  # a replay's audit row is counted too, but never refused: it answers what was done
                self._count_ledger_bytes(store_tx, caller, metered.written, check=replay is None)
            return outcome

        return self.store.transaction(unit)

    def replay_of(
        self, reader: StoreReader, tool: str, caller: Binding, args: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The seam every idempotency check goes through: the key's replay, None when free, else DIGEST_CONFLICT."""
        return reserved(reader, tool, caller, args)

    def candidate(self, reader: StoreReader, caller: Binding, cid: str) -> StoredCandidate:
        """The candidate, if the caller may act on it; NOT_FOUND through one path otherwise."""
        found = reader.candidate(scope_of(caller), cid)
        visible = found is not None and (
            found.state == "pending" or (found.state == "accepted" and found.record_state != "tombstoned")
        )
        if found is None or not visible:
            raise Refusal("NOT_FOUND")
        return found

    # -- capture -----------------------------------------------------------------------------

    def capture(
        self, caller: Binding, args: dict[str, Any], now: datetime, hooks: UnitHooks | None = None
    ) -> dict[str, Any]:
        tool = "engram_memory_capture"
        policy = self.policy_for(scope_of(caller))

        def change(tx: StoreTransaction) -> tuple[dict[str, Any], int | None]:
            effective = self._effective_payload(caller, args["payload"], policy, now)
            self._within_quotas(tx, caller, adding_bytes=0)  # the count first, before any sealing work
            cid = capture_candidate_id(caller, args["idempotency_key"])
            granted = authorization(caller, tool)
            digest_of_payload = payload_digest(effective)
            cursor, event_digest = append_event(
                tx, scope_of(caller),
                {"operation": "capture", "event_id": journal_event_id(caller, args["idempotency_key"]),
                 "candidate_id": cid, "to_state": "pending",
                 "recorded_at": instant(now), "authorization_receipt_digest": granted},
            )
            record = _record(effective, digest_of_payload, now, cursor, granted)
            sealed = self.cipher.seal(
                canonical_bytes({"payload": effective, "evidence": args["evidence"], "record": record}),
                scope=scope_of(caller), candidate_id=cid,
            )
            self._within_quotas(tx, caller, adding_bytes=len(sealed.ciphertext))  # a refusal rolls everything back
            tx.store_candidate(NewCandidate(
                cid, scope_of(caller), caller.principal, record["record_id"],
                self.digests.stored(digest_of_payload, scope_of(caller)), cursor, sealed, epoch_ms(now),
            ))
            self.quiet.shorten(epoch_ms(now) + 1000 * self.limits.expiry.pending_candidate_seconds)
            return {
                "status": "committed_pending",
                "candidate_id": cid,
                "record_digest": record["record_digest"],
                "cursor": str(cursor),
                "transaction_receipt_digest": transaction_receipt(
                    "capture", cursor, event_digest, now, record_digest=record["record_digest"]
                ),
            }, None

        return self.mutate(tool, caller, args, change, hooks)[0]

    def _count_ledger_bytes(self, tx: StoreTransaction, caller: Binding, written: int, *, check: bool) -> None:
        """Count what the unit of work leaves for good; RATE_LIMITED (all of it rolled back) past a bound."""
        quotas = self.limits.quotas
        for bound, principal in ((quotas.tenant, None), (quotas.principal, caller.principal)):
            if check and bound.ledger_bytes and over(
                tx.ledger_bytes(caller.tenant, principal), written, bound.ledger_bytes
            ):
                raise Refusal("RATE_LIMITED")
        tx.add_ledger_bytes(caller.tenant, caller.principal, written)

    def _within_quotas(self, tx: StoreTransaction, caller: Binding, *, adding_bytes: int) -> None:
        """RATE_LIMITED when one more pending candidate, of ``adding_bytes``, would pass a tenant or principal quota."""
        quotas = self.limits.quotas
        for bound, principal in ((quotas.tenant, None), (quotas.principal, caller.principal)):
            if not (bound.pending_candidates or bound.bytes):
                continue
            held = tx.holdings(caller.tenant, principal)
            if over(held.pending, 1, bound.pending_candidates) or over(held.bytes, adding_bytes, bound.bytes):
                raise Refusal("RATE_LIMITED")

    @staticmethod
    def _effective_payload(
        caller: Binding, payload: dict[str, Any], policy: ScopePolicy, now: datetime
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

    # -- admission -----------------------------------------------------------------------------

    def request_admission(
        self, caller: Binding, args: dict[str, Any], now: datetime, hooks: UnitHooks | None = None
    ) -> dict[str, Any]:
        tool = "engram_memory_request_admission"
        policy = self.policy_for(scope_of(caller))

        def change(tx: StoreTransaction) -> tuple[dict[str, Any], int | None]:
            found = self.candidate(tx, caller, args["candidate_id"])
            if found.state == "pending" and self._past_expiry(found, now):
                raise Refusal("NOT_FOUND")  # expired: the sweep shreds it like a withdraw
            if found.state == "accepted" or found.sealed is None:
                raise Refusal("ALREADY_TERMINAL")
            opened = json.loads(
                self.cipher.open(found.sealed, scope=scope_of(caller), candidate_id=found.candidate_id)
            )
            if self.readable(caller, opened["record"], now):
                view = CandidateView(payload=opened["payload"], evidence=opened["evidence"])
                decision = policy.admission.decide(view)
            else:  # a record no budget could serve is never admitted (EMC-GET-006)
                decision = AdmissionDecision("reject", UNREADABLE_POLICY_ID, UNREADABLE_POLICY_VERSION)
            status = {"accept": "accepted", "reject": "rejected", "adjudicate": "pending_adjudication"}[
                decision.decision
            ]
            if status == "accepted" and tx.is_tombstoned(scope_of(caller), found.payload_digest):
                status = "pending_adjudication"  # forgotten content is never re-admitted silently
            record = opened["record"]
            decision_digest = receipt_digest(
                "admission-decision",
                {"policy_id": decision.policy_id, "policy_version": decision.policy_version,
                 "record_digest": record["record_digest"], "decision": decision.decision, "issued_at": instant(now)},
            )
            outcome: dict[str, Any] = {"status": status, "candidate_id": found.candidate_id}
            if status == "pending_adjudication":
                cursor = found.created_cursor
                transaction = receipt_digest(
                    "admission-pending",
                    {"candidate_id": found.candidate_id, "cursor": str(cursor),
                     "decision_receipt_digest": decision_digest},
                )
            else:
                cursor, event_digest = append_event(
                    tx, scope_of(caller),
                    {"operation": "accept" if status == "accepted" else "reject",
                     "event_id": journal_event_id(caller, args["idempotency_key"]),
                     "candidate_id": found.candidate_id,
                     **({"record_id": record["record_id"]} if status == "accepted" else {}), "from_state": "pending",
                     "to_state": "accepted_current" if status == "accepted" else "rejected",
                     "recorded_at": instant(now), "authorization_receipt_digest": authorization(caller, tool)},
                )
                transaction = transaction_receipt(status, cursor, event_digest, now)
                if status == "accepted":
                    tx.admit(scope_of(caller), found.candidate_id, record, cursor)
                    outcome["record_id"] = record["record_id"]
                # Once the candidate leaves pending its key and sealed body are destroyed.
                tx.close_candidate(scope_of(caller), found.candidate_id,
                                   "accepted" if status == "accepted" else "rejected")
                if status == "rejected":  # refused content leaves the store files too; the ledger settles it later
                    self.store.erasures.record(tx, "candidate_key", scope_of(caller), found.candidate_id, cursor)
            outcome.update(
                cursor=str(cursor), decision_receipt_digest=decision_digest, transaction_receipt_digest=transaction
            )
            return {"outcome": outcome, "replayed": False}, None

        return self.mutate(tool, caller, args, change, hooks)[0]

    # -- withdraw and expiry ---------------------------------------------------------------------

    def withdraw(
        self, caller: Binding, args: dict[str, Any], now: datetime, hooks: UnitHooks | None = None
    ) -> dict[str, Any]:
        tool = "engram_memory_withdraw"

        def change(tx: StoreTransaction) -> tuple[dict[str, Any], int | None]:
            found = self.candidate(tx, caller, args["candidate_id"])
            if found.state != "pending":
                raise Refusal("ILLEGAL_TRANSITION")  # an admitted candidate is forgotten, not withdrawn
            granted = authorization(caller, tool)
            event_id = journal_event_id(caller, args["idempotency_key"])
            cursor, event_digest = append_event(
                tx, scope_of(caller),
                {"operation": "withdraw", "event_id": event_id, "candidate_id": found.candidate_id,
                 "from_state": "pending", "to_state": "withdrawn", "reason_ref": args["reason_ref"],
                 "recorded_at": instant(now), "authorization_receipt_digest": granted},
            )
            erasure = self._shred_candidate(tx, found, cursor)
            return {
                "receipt": {
                    "event_id": event_id, "operation": "withdraw", "from_state": "pending", "to_state": "withdrawn",
                    "cursor": str(cursor), "event_digest": event_digest, "authorization_receipt_digest": granted,
                    "transaction_receipt_digest": transaction_receipt("withdraw", cursor, event_digest, now),
                },
                "replayed": False,
                "key_destruction": "pending",  # until no store file holds the wrapped key or the ciphertext
            }, erasure

        value, erasure = self.mutate(tool, caller, args, change, hooks)
        return value if erasure is None else self._conclude_erasure(caller, args, value, "key_destruction", erasure)

    def _shred_candidate(self, tx: StoreTransaction, found: StoredCandidate, cursor: int) -> int:
        """Withdraw a pending candidate: destroy its wrapped key and sealed body, key its digest, queue the erasure.

        Shared by withdraw and by expiry, so both erase the same way; returns the erasure's id.
        """
        scope = found.scope
        tx.close_candidate(scope, found.candidate_id, "withdrawn",
                           payload_digest=self.digests.stored(found.payload_digest, scope))
        return self.store.erasures.record(tx, "candidate_key", scope, found.candidate_id, cursor)

    def _past_expiry(self, found: StoredCandidate, now: datetime) -> bool:
        created = found.created_ms
        return created is not None and created <= epoch_ms(now) - 1000 * self.limits.expiry.pending_candidate_seconds

    def expire_pending(self, now: datetime, *, even_if_quiet: bool = True) -> int:
        """Shred, like a withdraw, the oldest pending candidates past their lifetime (one batch); how many.

        Each gets a journal event (pending to withdrawn, reason ``reason:pending-expired``)
        and an erasure that the store settles in the background. Before a mutation
        (``even_if_quiet`` False) the store is not even asked while no candidate can be due.
        """
        now_ms, lifetime_ms = epoch_ms(now), 1000 * self.limits.expiry.pending_candidate_seconds
        cutoff = now_ms - lifetime_ms
        if not even_if_quiet and self.quiet.holds(now_ms):
            return 0
        # Another process's candidate, made after this look, is due a lifetime after its making on a clock at most
        # the skew behind: the window never reaches past that. This process's own shorten it as they are made.
        horizon_ms = lifetime_ms - 1000 * BINDING_CLOCK_SKEW
        generation = self.quiet.generation
        with self.store.snapshot() as reader:
            upcoming = reader.pending_due(cutoff + max(0, horizon_ms), 1)
        due_ms = upcoming[0].created_ms + lifetime_ms if upcoming and upcoming[0].created_ms is not None else None
        if due_ms is None or due_ms > now_ms:
            if horizon_ms > 0:
                quiet_until = now_ms + horizon_ms
                self.quiet.settle(generation, quiet_until if due_ms is None else min(quiet_until, due_ms))
            return 0

        def unit(tx: StoreTransaction) -> int:
            due = tx.pending_due(cutoff, EXPIRY_BATCH)
            for found in due:
                # The server acts as its own principal; the candidate id stands for an idempotency key.
                server = Binding(found.scope.tenant, found.scope.workspace, EXPIRY_PRINCIPAL, EXPIRY_PRINCIPAL,
                                 "", "", "", "", 0, 0, token_id=f"expiry:{found.candidate_id}")
                cursor, _ = append_event(
                    tx, found.scope,
                    {"operation": "withdraw", "event_id": journal_event_id(server, server.token_id),
                     "candidate_id": found.candidate_id, "from_state": "pending", "to_state": "withdrawn",
                     "reason_ref": EXPIRY_REASON, "recorded_at": instant(now),
                     "authorization_receipt_digest": authorization(server, "expiry")},
                )
                self._shred_candidate(tx, found, cursor)
            return len(due)

        return self.store.transaction(unit)

    # -- forget ------------------------------------------------------------------------------------

    def forget(
        self, caller: Binding, args: dict[str, Any], now: datetime, hooks: UnitHooks | None = None
    ) -> dict[str, Any]:
        tool = "engram_memory_forget"

        def change(tx: StoreTransaction) -> tuple[dict[str, Any], int | None]:
            found = tx.record(scope_of(caller), args["record_id"])
            if found is None or found.state != "accepted_current":
                raise Refusal("NOT_FOUND")
            from_state = "expired" if expired(found, now) else "accepted_current"
            granted = authorization(caller, tool)
            event_id = journal_event_id(caller, args["idempotency_key"])
            cursor, event_digest = append_event(
                tx, scope_of(caller),
                {"operation": "tombstone", "event_id": event_id, "record_id": found.record_id,
                 "from_state": from_state, "to_state": "tombstoned", "reason_ref": args["reason_ref"],
                 "recorded_at": instant(now), "authorization_receipt_digest": granted},
            )
            tx.forget(scope_of(caller), found.record_id, self.digests.stored(found.payload_digest, scope_of(caller)))
            erasure = self.store.erasures.record(tx, "record_content", scope_of(caller), found.record_id, cursor)
            return {
                "receipt": {
                    "event_id": event_id, "operation": "tombstone", "from_state": from_state,
                    "to_state": "tombstoned", "cursor": str(cursor), "event_digest": event_digest,
                    "authorization_receipt_digest": granted,
                    "transaction_receipt_digest": transaction_receipt("tombstone", cursor, event_digest, now),
                },
                "replayed": False,
                "projection_invalidation": "pending",  # until no store file holds the text
                "coverage_receipt_digest": profile_digest(
                    "forget-coverage",
                    {"record_id": found.record_id, "cursor": str(cursor),
                     "surfaces": list(self.store.erasure_surfaces)},
                ),
            }, erasure

        value, erasure = self.mutate(tool, caller, args, change, hooks)
        if erasure is None:
            return value
        return self._conclude_erasure(caller, args, value, "projection_invalidation", erasure)

    def _conclude_erasure(
        self, caller: Binding, args: dict[str, Any], value: dict[str, Any], field: str, erasure: int
    ) -> dict[str, Any]:
        """The erasure's answer: `complete` only once the store's flush has covered it, else the reserved `pending`.

        The flush waits briefly for other readers and never inside a unit of work.
        When it succeeds, the reservation is updated in the same unit of work that
        confirms completion, so a replay answers exactly what this call answers.
        """
        done = {**value, field: "complete"}

        def confirm(tx: StoreTransaction) -> bool:
            if not tx.erasure_complete(erasure):
                return False
            tx.update_reservation(scope_of(caller), caller.principal, args["idempotency_key"], done)
            return True

        if not self.store.settles_on_request:
            return value  # the store's flush costs more than a call may wait: its background settles it
        try:
            self.store.erasures.settle()
            return done if self.store.transaction(confirm) else value
        except Exception:  # the erasure is committed and queued; the background retry finishes it
            log.exception("erasure could not be confirmed now; it stays pending")
            return value


def _record(effective: dict[str, Any], digest_of_payload: str, now: datetime, cursor: int,
            granted: str) -> dict[str, Any]:
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
        "authorization_receipt_digest": granted,
        "trust": trust,
    }
    record["record_digest"] = record_digest(record)
    record["record_id"] = record_id(record["record_digest"])
    return record


def purge_horizon(now: datetime) -> str:
    """Consumed confirmation ids older than this can no longer be replayed (see ``Engine.consume_state``)."""
    # A host reference may be approved up to the skew ahead of the clock and honoured up to the skew past its
    # expiry, so its id must outlive the TTL by twice the skew; one skew more because on a shared store the
    # replica that purges may run on a clock that far ahead of the one that honoured the reference.
    return instant(now - timedelta(seconds=CONFIRMATION_TTL_MAX + 3 * BINDING_CLOCK_SKEW))


class QuietWindow:
    """Until when (epoch ms) no pending candidate can be due, as last seen, for the sweep before each mutation.

    A look at the store settles the window only if no candidate was made meanwhile (the generation
    moved), so a look taken before a candidate committed never hides that candidate's expiry.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until_ms = 0
        self.generation = 0

    def holds(self, now_ms: int) -> bool:
        return now_ms < self._until_ms

    def shorten(self, due_ms: int) -> None:
        with self._lock:
            self.generation += 1
            self._until_ms = min(self._until_ms, due_ms)

    def settle(self, generation: int, until_ms: int) -> None:
        with self._lock:
            if generation == self.generation:
                self._until_ms = until_ms
