"""Canonical JSON, domain-separated digests and the ids derived from them.

The scheme is the upstream engine's, so ids and digests interoperate with it:
NFC-normalise every string, serialise with RFC 8785 (JCS), and hash
``domain || canonical bytes`` with SHA-256. spec/host-profile.md lists the
domains this project adds for the MCP layer.
"""

from __future__ import annotations

import base64
import hashlib
import unicodedata
from typing import Any

import rfc8785

UPSTREAM = "graphify-memory"  # kept by upstream after its rename: changing it breaks every digest
PROFILE = "engram-memory-mcp"  # domains this project defines for the MCP layer


def normalize(value: Any) -> Any:
    """NFC-normalise every string and key; refuse keys that collide once normalised."""
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, list):
        return [normalize(item) for item in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            nkey = unicodedata.normalize("NFC", key)
            if nkey in out:
                raise ValueError("object keys collide after NFC normalisation")
            out[nkey] = normalize(item)
        return out
    return value


def canonical_bytes(value: Any, *, normalize: bool = True) -> bytes:
    """RFC 8785 bytes of ``value`` (after NFC normalisation unless told otherwise)."""
    return rfc8785.dumps(_normalize(value) if normalize else value)


_normalize = normalize


def digest(domain: str, value: Any) -> str:
    """``sha256:<hex>`` of a NUL-terminated domain followed by the canonical bytes."""
    h = hashlib.sha256(domain.encode("utf-8") + b"\0")
    h.update(canonical_bytes(value))
    return "sha256:" + h.hexdigest()


def receipt_digest(kind: str, value: dict[str, Any], field: str = "receipt_digest", *, family: str = UPSTREAM) -> str:
    """Digest of a receipt-like object without its own digest field."""
    body = {k: v for k, v in value.items() if k != field}
    return digest(f"{family}/{kind}/v1", body)


def payload_digest(payload: dict[str, Any]) -> str:
    return digest(f"{UPSTREAM}/payload/v2", payload)


def record_digest(record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k not in ("record_id", "record_digest")}
    return digest(f"{UPSTREAM}/record/v2", body)


def record_id(record_digest_value: str) -> str:
    """``mem_`` + lowercase unpadded base32 of the digest's 32 raw bytes."""
    raw = bytes.fromhex(record_digest_value.removeprefix("sha256:"))
    return "mem_" + base64.b32encode(raw).decode("ascii").lower().rstrip("=")


def candidate_id(source_ref: str, sequence: str, idempotency_key: str) -> str:
    value = {"source_ref": source_ref, "sequence": sequence, "idempotency_key": idempotency_key}
    return "candidate_" + receipt_digest("capture-identity", value).removeprefix("sha256:")


def profile_digest(kind: str, value: Any) -> str:
    """A digest in one of this project's MCP-layer domains (spec/host-profile.md)."""
    return digest(f"{PROFILE}/{kind}/v1", value)


ZERO_DIGEST = "sha256:" + "0" * 64
