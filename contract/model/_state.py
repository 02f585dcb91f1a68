"""What the contract lets a client observe about memory: candidates, records, tombstones, keys and pages.

The state holds only what the model has seen happen (the calls it judged and the answers they got), never
how a server stores it. Everything is immutable: every judged answer yields a new state, so a search over
interleavings (a linearizability check) or a generated sequence can keep and compare as many as it needs.

An entity whose last answer the model could not place is *doubtful*: the calls that name it afterwards are
not judged, so one wrong answer is reported once, not again by every later call that depends on it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType
from typing import Any, NamedTuple

from engram_mcp.contract._canonical import canonical_bytes


class Scope(NamedTuple):
    """The exact scope the host binds a call to (§0: every call is bound to one tenant and workspace)."""

    tenant: str
    workspace: str

    def __str__(self) -> str:
        return f"{self.tenant}/{self.workspace}"


class CandidateState(str, Enum):  # noqa: UP042 - StrEnum would change how states format in 3.11
    PENDING = "pending"
    ADJUDICATING = "pending_adjudication"  # admission answered pending_adjudication; the contract says no more
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    WITHDRAWN = "withdrawn"
    FORGOTTEN = "forgotten"  # accepted, and its record was tombstoned since
    DOUBTFUL = "doubtful"


class RecordState(str, Enum):  # noqa: UP042 - as above
    CURRENT = "accepted_current"  # expiry is judged against the clock at each call, not stored
    TOMBSTONED = "tombstoned"
    DOUBTFUL = "doubtful"


@dataclass(frozen=True)
class Content:
    """What a capture said, as far as later answers depend on it."""

    payload: bytes  # the payload's canonical JSON: equal content, equal bytes (§3.3 compares payloads)
    texts: tuple[str, ...]  # the components' texts, to recognise them in a returned record
    words: frozenset[str]  # lower-cased alphanumeric tokens of the texts, for the queries the caller owns
    expires_at: int | None = None  # retention.expires_at in epoch milliseconds, when the capture set one
    text_bytes: int = 0


WORD = re.compile(r"[0-9a-z]+")


def words_of(text: str) -> frozenset[str]:
    return frozenset(WORD.findall(text.lower()))


def content_of(payload: Any, expires_at: int | None = None) -> Content:
    texts = tuple(str(c.get("text", "")) for c in payload.get("components", []) if isinstance(c, dict)) \
        if isinstance(payload, dict) else ()
    words = frozenset().union(*(words_of(t) for t in texts)) if texts else frozenset()
    return Content(canonical_bytes(payload, normalize=False), texts, words, expires_at,
                   sum(len(t.encode("utf-8", "surrogatepass")) for t in texts))


@dataclass(frozen=True)
class Candidate:
    id: str
    scope: Scope
    owner: str  # the principal that captured it
    state: CandidateState
    content: Content
    decisions: frozenset[str] = frozenset()  # what the host's admission policy may decide for it
    record_id: str | None = None


@dataclass(frozen=True)
class Record:
    id: str
    scope: Scope
    candidate_id: str
    state: RecordState
    content: Content


@dataclass(frozen=True)
class KeyUse:
    """What an idempotency key (§3.5: scoped to the principal) is bound to after a call that used it.

    ``value`` is the first success's output.value; ``refused`` the code of a non-retriable refusal that may have
    bound the key (the contract does not say whether a refusal uses a key up, so either is allowed later), and
    ``also`` the later refused uses ((tool, operation, code)), any of which may be the one that bound it."""

    tool: str
    operation: bytes  # the call's arguments but the key, canonical: same key and same operation is a repetition
    value: Mapping[str, Any] | None = None
    refused: str | None = None
    doubtful: bool = False  # an answer the model could not place, or MUTATION_OUTCOME_UNKNOWN: anything may follow
    lapsed: str | None = None  # a retriable refusal (DEADLINE_EXCEEDED, CANCELLED…) that left the key free
    also: tuple[tuple[str, bytes, str], ...] = ()

    def refusals(self) -> tuple[tuple[str, bytes, str], ...]:
        """Every refused use that may have bound the key: (tool, operation, code), the first one first."""
        first = ((self.tool, self.operation, self.refused),) if self.refused is not None else ()
        return (*first, *self.also)


class Page(NamedTuple):
    """A chain of search pages: what its first page had to find and what the chain has returned so far."""

    scope: Scope
    principal: str
    request: bytes  # query and effective parameters, canonical
    required: frozenset[str]  # visible records matching a query the caller owns, when the chain began
    seen: frozenset[str]
    version: int  # the scope's version when the page was served: a later change may make the cursor stale


KeyId = tuple[Scope, str, str]  # (scope, principal, idempotency_key)


def _frozen(mapping: Mapping[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class State:
    """The observable state of one store, as the calls judged so far revealed it."""

    candidates: Mapping[tuple[Scope, str], Candidate] = field(default_factory=lambda: _frozen({}))
    records: Mapping[tuple[Scope, str], Record] = field(default_factory=lambda: _frozen({}))
    keys: Mapping[KeyId, KeyUse] = field(default_factory=lambda: _frozen({}))
    pages: Mapping[str, Page] = field(default_factory=lambda: _frozen({}))
    tombstones: Mapping[Scope, frozenset[bytes]] = field(default_factory=lambda: _frozen({}))
    versions: Mapping[Scope, int] = field(default_factory=lambda: _frozen({}))  # bumped by every change

    # -- reading -----------------------------------------------------------------------------------------------

    def candidate(self, scope: Scope, ident: Any) -> Candidate | None:
        return self.candidates.get((scope, ident)) if isinstance(ident, str) else None

    def record(self, scope: Scope, ident: Any) -> Record | None:
        return self.records.get((scope, ident)) if isinstance(ident, str) else None

    def candidate_elsewhere(self, scope: Scope, ident: Any) -> Candidate | None:
        """A candidate of that id issued in another scope (the call's target lies outside its scope)."""
        return next((c for (s, i), c in self.candidates.items() if i == ident and s != scope), None)

    def record_elsewhere(self, scope: Scope, ident: Any) -> Record | None:
        return next((r for (s, i), r in self.records.items() if i == ident and s != scope), None)

    def issued_candidate(self, ident: str) -> bool:
        return any(i == ident for _, i in self.candidates)

    def issued_record(self, ident: str) -> bool:
        return any(i == ident for _, i in self.records)

    def tombstoned(self, scope: Scope, payload: bytes) -> bool:
        return payload in self.tombstones.get(scope, frozenset())

    def version(self, scope: Scope) -> int:
        return self.versions.get(scope, 0)

    # -- changing ---------------------------------------------------------------------------------------------

    def with_candidate(self, candidate: Candidate) -> State:
        return replace(self, candidates=_frozen({**self.candidates, (candidate.scope, candidate.id): candidate}),
                       versions=self._bumped(candidate.scope))

    def with_record(self, record: Record) -> State:
        return replace(self, records=_frozen({**self.records, (record.scope, record.id): record}),
                       versions=self._bumped(record.scope))

    def _bumped(self, scope: Scope) -> Mapping[Scope, int]:
        return _frozen({**self.versions, scope: self.version(scope) + 1})

    def with_key(self, key: KeyId, use: KeyUse) -> State:
        return replace(self, keys=_frozen({**self.keys, key: use}))

    def with_page(self, cursor: str, page: Page) -> State:
        return replace(self, pages=_frozen({**self.pages, cursor: page}))

    def with_tombstone(self, scope: Scope, payload: bytes) -> State:
        held = self.tombstones.get(scope, frozenset())
        return replace(self, tombstones=_frozen({**self.tombstones, scope: held | {payload}}))

    def doubting(self, scope: Scope, idents: Iterable[Any]) -> State:
        """Every candidate and record of these ids in the scope made doubtful."""
        state = self
        for ident in idents:
            if (found := state.candidate(scope, ident)) is not None:
                state = state.with_candidate(replace(found, state=CandidateState.DOUBTFUL))
            if (held := state.record(scope, ident)) is not None:
                state = state.with_record(replace(held, state=RecordState.DOUBTFUL))
        return state


def operation_bytes(tool: str, arguments: Mapping[str, Any]) -> bytes:
    """The operation a key names: the tool's arguments without the key itself, in canonical JSON."""
    rest = {k: v for k, v in arguments.items() if k != "idempotency_key"}
    return hashlib.sha256(tool.encode() + b"\0" + canonical_bytes(rest, normalize=False)).digest()
