"""The reference server's extension points: what a host may swap without touching the core.

The core speaks only to these Protocols; the AES-GCM cipher and the built-in
admission policies are one implementation each.
"""

from engram_mcp.reference._ports import (
    AdmissionDecision,
    AdmissionPolicy,
    CandidateView,
    Cipher,
    Decision,
    Scope,
    SealBroken,
    Sealed,
)

__all__ = [
    "AdmissionDecision",
    "AdmissionPolicy",
    "CandidateView",
    "Cipher",
    "Decision",
    "Scope",
    "SealBroken",
    "Sealed",
]
