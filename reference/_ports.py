"""The reference server's extension points, as Protocols.

The core speaks only to these; the SQLite store, the AES-GCM cipher and the
built-in admission policies are one implementation each, and a host can swap
any of them without touching the core. The store port speaks in domain terms
(reservations, candidates, records, journal, audit, erasures): no SQL crosses it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, runtime_checkable

from engram_mcp.reference._errors import ReferenceServerError

if TYPE_CHECKING:
    from engram_mcp.reference._erasure import ErasureLedger

Decision = Literal["accept", "reject", "adjudicate"]


@dataclass(frozen=True)
class Scope:
    tenant: str
    workspace: str


@dataclass(frozen=True)
class Sealed:
    """A candidate's sealed body: the ciphertext and its key wrapped by the key-encryption key."""

    ciphertext: bytes
    wrapped_key: bytes


class Cipher(Protocol):
    """Seals pending candidates so that no pending plaintext reaches the store."""

    def seal(self, plaintext: bytes, *, scope: Scope, candidate_id: str) -> Sealed: ...

    def open(self, sealed: Sealed, *, scope: Scope, candidate_id: str) -> bytes:
        """Raises ``SealBroken`` when the key, ciphertext or associated data do not match."""
        ...


class SealBroken(ReferenceServerError):
    """A sealed body could not be opened: wrong key, tampered bytes, or another candidate's data."""


@dataclass(frozen=True)
class CandidateView:
    """What an admission policy may look at: the decrypted capture, never the host context."""

    payload: dict[str, Any]
    evidence: dict[str, Any]


@dataclass(frozen=True)
class AdmissionDecision:
    decision: Decision
    policy_id: str
    policy_version: str


class AdmissionPolicy(Protocol):
    policy_id: str
    policy_version: str

    def decide(self, candidate: CandidateView) -> AdmissionDecision: ...


# -- the store port ------------------------------------------------------------------------------------------

CandidateState = Literal["pending", "accepted", "rejected", "withdrawn"]
RecordState = Literal["accepted_current", "tombstoned"]
Subject = Literal["candidate_key", "record_content"]
Chain = Literal["main", "refused"]


@dataclass(frozen=True)
class Reservation:
    """An idempotency key's reservation: the intent it is bound to and the value the first call answered."""

    intent: str
    value: dict[str, Any]


@dataclass(frozen=True)
class NewCandidate:
    """A captured candidate as stored: its body only sealed, its payload digest already keyed."""

    candidate_id: str
    scope: Scope
    principal: str
    record_id: str
    payload_digest: str
    created_cursor: int
    sealed: Sealed
    created_ms: int


@dataclass(frozen=True)
class StoredCandidate:
    """A candidate as read back; ``sealed`` is None once it left pending; ``record_state`` is its record's, if any."""

    candidate_id: str
    scope: Scope
    principal: str
    state: CandidateState
    record_id: str
    payload_digest: str
    created_cursor: int
    sealed: Sealed | None
    created_ms: int | None
    record_state: RecordState | None


@dataclass(frozen=True)
class StoredRecord:
    """An admitted record; ``body`` (the record as admitted) is None once it is tombstoned."""

    record_id: str
    scope: Scope
    candidate_id: str
    state: RecordState
    body: dict[str, Any] | None
    payload_digest: str
    valid_from: int
    valid_to: int | None
    expires_at: str | None
    recorded_cursor: int


@dataclass(frozen=True)
class JournalEntry:
    """One lifecycle event (ids, states and digests, never content), chained to the one before it."""

    cursor: int
    scope: Scope
    event: dict[str, Any]
    event_hash: str
    previous_hash: str


@dataclass(frozen=True)
class AuditRow:
    seq: int
    chain: Chain
    entry: dict[str, Any]
    entry_hash: str
    previous_hash: str


@dataclass(frozen=True)
class AuditCheckpoint:
    """Where a compacted chain resumes: the seq and hash of the last row removed, and how many were removed."""

    chain: Chain
    through_seq: int
    entry_hash: str
    rows_compacted: int


@dataclass(frozen=True)
class Outstanding:
    """An erasure whose bytes may still be in a store file: ids and times only, never content."""

    erasure_id: int
    subject: Subject
    tenant: str
    workspace: str
    subject_id: str
    cursor: int
    requested_at: str


@dataclass(frozen=True)
class Holdings:
    """What a holder (a tenant, or a principal within it) holds: pending candidates, and sealed bytes of the
    candidates pending or admitted and not forgotten."""

    pending: int
    bytes: int


@dataclass(frozen=True)
class RankingProfile:
    """The lexical ranking a store performs, named in every rank receipt it serves."""

    name: str
    version: str
    scoring_formula: str
    config_digest: str


class StoreReader(Protocol):
    """Reads inside one consistent snapshot: everything read in one unit of work sees the same committed state.

    Every method that takes a scope reads that scope only: another scope's rows are
    never returned, matched or counted, whatever ids they share.
    """

    def reservation(self, scope: Scope, principal: str, key: str) -> Reservation | None:
        """The reservation of ``key`` by ``principal`` in ``scope`` (keys are per principal, never shared)."""
        ...

    def candidate(self, scope: Scope, candidate_id: str) -> StoredCandidate | None: ...

    def record(self, scope: Scope, record_id: str) -> StoredRecord | None: ...

    def is_tombstoned(self, scope: Scope, payload_digest: str) -> bool:
        """Whether content with this keyed payload digest was forgotten in ``scope``."""
        ...

    def search(self, scope: Scope, tokens: Sequence[str], valid_as_of_ms: int, limit: int) -> list[str]:
        """Ids of the records current at ``valid_as_of_ms`` (accepted_current, valid then, not expired then) that
        match any token, best first by the store's ``ranking``, ties broken by record id; at most ``limit``.

        Only ``scope``'s records are matched, and only they enter any scoring statistic
        (document counts, lengths, term frequencies). Served from an index, never by
        scanning the scope.
        """
        ...

    def scope_cursor(self, scope: Scope) -> int:
        """The cursor of the scope's latest journal event (0 before the first): its snapshot number."""
        ...

    def journal_head(self) -> tuple[int, str]:
        """The store-wide last journal cursor and event hash; ``(0, ZERO_DIGEST)`` when the journal is empty."""
        ...

    def journal(self) -> Iterator[JournalEntry]:
        """Every journal entry, in cursor order (for verification)."""
        ...

    def holdings(self, tenant: str, principal: str | None = None) -> Holdings:
        """The tenant's holdings over all its workspaces, or, with ``principal``, that principal's within it.

        Read from counters the store keeps in step with every write, at a cost that does not grow with the
        tenant."""
        ...

    def recount_holdings(self, tenant: str, principal: str | None = None) -> Holdings:
        """What ``holdings`` answers, summed afresh over the candidates and records (a check of the counters)."""
        ...

    def holdings_drift(self) -> bool:
        """Whether any holder's counters differ from what ``recount_holdings`` would answer (``verify``)."""
        ...

    def ledger_bytes(self, tenant: str, principal: str | None = None) -> int:
        """Bytes of lifecycle records (reservations, journal events, audit rows) the tenant's mutations, or with
        ``principal`` that principal's, have written (reference/_ledger_bytes.py)."""
        ...

    def pending_due(self, created_before_ms: int, limit: int) -> list[StoredCandidate]:
        """Pending candidates (any scope) created at or before ``created_before_ms``, oldest first, at most
        ``limit``."""
        ...

    def erasure_complete(self, erasure_id: int) -> bool: ...

    def outstanding_erasures(self) -> list[Outstanding]:
        """Erasures still pending, in the order they were recorded."""
        ...

    def audit_head(self, chain: Chain) -> str:
        """The chain's last entry hash; its checkpoint's hash when every row was compacted; ZERO_DIGEST if none."""
        ...

    def audit_count(self, chain: Chain) -> int: ...

    def audit_rows(self) -> Iterator[AuditRow]:
        """Every audit row of both chains, in seq order (seq grows across both chains)."""
        ...

    def audit_checkpoints(self) -> dict[Chain, AuditCheckpoint]: ...


class StoreTransaction(StoreReader, Protocol):
    """One unit of work: every write below commits together or not at all, serialized against every other
    unit of work on the same store, in this process or any other sharing it."""

    def add_ledger_bytes(self, tenant: str, principal: str, written: int) -> None:
        """Count ``written`` ledger bytes for the tenant and for the principal within it."""
        ...

    def reserve(self, scope: Scope, principal: str, key: str, reservation: Reservation) -> None:
        """Reserve ``key`` for ``principal`` in ``scope``, exactly once: when another unit of work reserved it
        first, this one must not commit (the store re-runs it, and it then sees that reservation)."""
        ...

    def update_reservation(self, scope: Scope, principal: str, key: str, value: dict[str, Any]) -> None:
        """Replace a reservation's value (an erasure completed); its intent never changes."""
        ...

    def journal_append(self, entry: JournalEntry) -> None:
        """Append an event at ``journal_head()[0] + 1``; two units of work never commit the same cursor."""
        ...

    def store_candidate(self, candidate: NewCandidate) -> None:
        """Store a pending candidate; its ``body_bytes`` for the quotas are the sealed ciphertext's length."""
        ...

    def close_candidate(
        self, scope: Scope, candidate_id: str, state: CandidateState, *, payload_digest: str | None = None
    ) -> None:
        """Move a pending candidate to ``state`` and destroy its sealed body and wrapped key in the same write
        (replacing its payload digest when one is given)."""
        ...

    def admit(self, scope: Scope, candidate_id: str, record: dict[str, Any], cursor: int) -> None:
        """Store an accepted record (``record`` as admitted, with its id, payload digest, valid time and
        retention) as accepted_current, and index it in the scope's search index in the same write."""
        ...

    def forget(self, scope: Scope, record_id: str, keyed_digest: str) -> None:
        """Tombstone a record: its body and index entry are removed so no later search or read can see its
        text, its payload digest is replaced by ``keyed_digest``, which is also kept as a scope tombstone."""
        ...

    def consume_confirmation(self, nonce: str, at: str) -> bool:
        """Burn a confirmation state or host reference id, exactly once across every process: False when it
        was consumed before."""
        ...

    def purge_confirmations(self, consumed_before: str) -> None:
        """Forget consumed ids older than an instant, once they can no longer be replayed."""
        ...

    def record_erasure(self, subject: Subject, scope: Scope, subject_id: str, cursor: int, at: str) -> int:
        """Queue an erasure as pending, in this unit of work (the same one as the delete); its id."""
        ...

    def complete_erasures(self, erasure_ids: Sequence[int], at: str) -> None:
        """Mark pending erasures complete; only called once the store's residue flush has covered them."""
        ...

    def audit_append(self, row: AuditRow) -> int:
        """Append an audit row to its chain (``row.seq`` is ignored: the store assigns the next); the seq."""
        ...

    def audit_compact(self, chain: Chain, rows: int) -> AuditCheckpoint | None:
        """Delete the ``rows`` oldest rows of ``chain`` and move its checkpoint past them (adding to its
        ``rows_compacted``); the new checkpoint, or None when the chain has fewer rows."""
        ...


T = TypeVar("T")


class MemoryStore(Protocol):
    """Where the engine keeps everything: the one extension point every operation goes through.

    A unit of work is a function of a ``StoreTransaction``: ``transaction`` runs it
    atomically and isolated from every other (SERIALIZABLE, or locks to the same
    effect), and may run it more than once when the store must retry after a
    conflict; so it must touch the world only through the transaction (pure
    computation, sealing and policy decisions are fine). ``snapshot`` opens a
    read-only consistent view. ``flush_residues`` and ``erasures`` serve the
    erasure ledger (reference/_erasure.py).
    """

    ranking: RankingProfile
    # Where a forgotten record's text can live in this store until its erasure settles; named in the
    # forget coverage digest, so a receipt never claims a place the store does not have.
    erasure_surfaces: tuple[str, ...]
    erasures: ErasureLedger  # the store's own ledger: started when the store opens, stopped by ``close``
    # Whether an erasure's call tries the flush before it answers (True: the flush is cheap, as an SQLite
    # checkpoint is); False leaves every erasure `pending` to the ledger's background settling.
    settles_on_request: bool

    def transaction(self, work: Callable[[StoreTransaction], T]) -> T:
        """Run ``work`` in one unit of work and commit it; an exception from ``work`` rolls it back and
        propagates."""
        ...

    def snapshot(self) -> AbstractContextManager[StoreReader]: ...

    def flush_residues(self) -> bool:
        """Drop every retained copy of deleted data without blocking for long; True only when all are gone
        (see ``ResidueFlusher`` in reference/_erasure.py)."""
        ...

    def close(self) -> None: ...

    def count_call(self, tenant: str, principal: str, window: int, bounds: tuple[int, int]) -> bool:
        """Count one call in ``window`` for the tenant and for the principal within it, or neither: False when
        either holder already has its bound of calls there (``bounds`` = tenant's, principal's; 0: no bound).

        Atomic across every process sharing the store, so replicas together hold the bound. A counter row
        per holder is overwritten when a later window begins; a call naming an earlier window (a replica
        whose clock lags) counts into the latest one. Losing the last counts to a crash is acceptable.
        """
        ...


@runtime_checkable
class KeysLegacyDigests(Protocol):
    """A store that may hold payload digests an older server wrote unkeyed: the engine has it key them once,
    at start, through this method (a store without such history simply does not have it)."""

    def key_legacy_digests(self, keyed: Callable[[str, Scope], str]) -> None: ...
