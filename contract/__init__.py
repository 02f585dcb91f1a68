"""Contract 1.0.0 as data: the loader, the argument oracle and the digest scheme.

The reference server and the conformance harness both import from here; the
data files under schemas/, spec/ and fixtures/ are read by ``_loader`` alone.
"""

from engram_mcp.contract._canonical import (
    ZERO_DIGEST,
    candidate_id,
    canonical_array,
    canonical_bytes,
    canonical_object,
    digest,
    normalize,
    payload_digest,
    profile_digest,
    profile_digest_and_size,
    receipt_digest,
    record_digest,
    record_id,
)
from engram_mcp.contract._loader import (
    CONTRACT_VERSION,
    Contract,
    Limit,
    ProtocolError,
    Rule,
    Tool,
    ToolError,
    load,
)
from engram_mcp.contract.validation import ArgumentOracle, Verdict, Violation

__all__ = [
    "CONTRACT_VERSION",
    "ZERO_DIGEST",
    "ArgumentOracle",
    "Contract",
    "Limit",
    "ProtocolError",
    "Rule",
    "Tool",
    "ToolError",
    "Verdict",
    "Violation",
    "candidate_id",
    "canonical_array",
    "canonical_bytes",
    "canonical_object",
    "digest",
    "load",
    "normalize",
    "payload_digest",
    "profile_digest",
    "profile_digest_and_size",
    "receipt_digest",
    "record_digest",
    "record_id",
]
