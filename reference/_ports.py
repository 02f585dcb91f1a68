"""The reference server's extension points, as Protocols.

The core speaks only to these; the SQLite store, the AES-GCM cipher and the
built-in admission policies are one implementation each, and a host can swap
any of them without touching the core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

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


class SealBroken(Exception):
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
