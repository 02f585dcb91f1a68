"""Canonical JSON, domain-separated digests and the ids derived from them.

The scheme is the upstream engine's, so ids and digests interoperate with it:
NFC-normalise every string, serialise with RFC 8785 (JCS), and hash
``domain || canonical bytes`` with SHA-256. spec/host-wiring.md lists the
domains this project adds for the MCP layer.
"""

from __future__ import annotations

import base64
import hashlib
import json
import unicodedata
from typing import Any

import rfc8785

UPSTREAM = "graphify-memory"  # kept by upstream after its rename: changing it breaks every digest
PROFILE = "engram-memory-mcp"  # domains this project defines for the MCP layer


def _nfc(text: str) -> str:
    return text if text.isascii() else unicodedata.normalize("NFC", text)  # ASCII is always NFC


def normalize(value: Any) -> Any:
    """NFC-normalise every string and key; refuse keys that collide once normalised."""
    if isinstance(value, str):
        return _nfc(value)
    if isinstance(value, list):
        return [_nfc(item) if type(item) is str else normalize(item) for item in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            nkey = _nfc(key) if type(key) is str else unicodedata.normalize("NFC", key)
            if nkey in out:
                raise ValueError("object keys collide after NFC normalisation")
            out[nkey] = normalize(item)
        return out
    return value


def canonical_bytes(value: Any, *, normalize: bool = True) -> bytes:
    """RFC 8785 bytes of ``value`` (after NFC normalisation unless told otherwise)."""
    if normalize:
        plain = _plain_json(value)
        if plain is not None and plain.isascii():  # every string and key ASCII: NFC leaves it as it is
            return plain
        value = _normalize(value)
    return _plain_json(value) or rfc8785.dumps(value)


_SAFE_INTEGER = 2**53 - 1  # RFC 8785 has no form for integers beyond it
# Where Python's repr of a float and ECMAScript's Number-to-string agree: both write the shortest digits that
# round-trip, in fixed notation for magnitudes from 1e-4 (Python's lower edge; ES6's is 1e-6) up to 1e16 (Python's
# upper edge; ES6's is 1e21), except that Python writes an integral float with ".0".
_FIXED_FLOATS = (1e-4, 1e16)


def _plain(value: Any) -> bool:
    """Whether compact, key-sorted ``json.dumps`` output is already the RFC 8785 form of ``value``.

    It is for strings, booleans, null, safe integers and the floats both write alike (see
    ``_FIXED_FLOATS``) in arrays and objects: the two escape strings alike, and code-point key
    order is UTF-16 order while no key leaves the BMP. Other floats and anything rarer go through
    the full serialiser.

    Every digest and size of the server and the harness asks this first, so it walks the value with
    a stack rather than by recursion (about 1.6 times faster on a page of search results).
    """
    pending = [value]
    pop, extend = pending.pop, pending.extend
    visited = 0
    while pending:
        item = pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is dict:
            for key in item:
                if type(key) is not str or not (key.isascii() or max(key) <= "\uffff"):
                    return False
            extend(item.values())
        elif kind is list:
            extend(item)
        elif kind is int:
            if not -_SAFE_INTEGER <= item <= _SAFE_INTEGER:
                return False
        elif kind is float:  # NaN and the infinities fail the range test
            if not (_FIXED_FLOATS[0] <= abs(item) < _FIXED_FLOATS[1] and not item.is_integer()):
                return False
        else:
            return False
        visited += 1
        if visited > _VISITS_AT_MOST:  # a value that contains itself: the full serialiser refuses it
            return False
    return True


_VISITS_AT_MOST = 10_000_000  # numbers and containers looked at; strings are not counted


def _plain_json(value: Any) -> bytes | None:
    """The RFC 8785 bytes of a plain value (see ``_plain``) by the C encoder; None for any other value."""
    if not _plain(value):
        return None
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: the full serialiser refuses it in its own words
        return None


_normalize = normalize


def digest(domain: str, value: Any) -> str:
    """``sha256:<hex>`` of a NUL-terminated domain followed by the canonical bytes."""
    return _digest_of(domain, canonical_bytes(value))


def _digest_of(domain: str, canonical: bytes) -> str:
    h = hashlib.sha256(domain.encode("utf-8") + b"\0")
    h.update(canonical)
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


def canonical_object(members: dict[str, bytes]) -> bytes:
    """The RFC 8785 bytes of an object whose members' values are given as their own RFC 8785 bytes.

    RFC 8785 serialises every value alone and orders an object's members by key, so the whole is its
    members' bytes in key order. Keys must be ASCII, where that order (UTF-16 code units) is string order.
    """
    if not all(key.isascii() for key in members):
        raise ValueError("canonical_object takes ASCII keys only")
    joined = b",".join(json.dumps(key, ensure_ascii=False).encode() + b":" + members[key] for key in sorted(members))
    return b"{" + joined + b"}"


def canonical_array(items: list[bytes]) -> bytes:
    """The RFC 8785 bytes of an array whose items are given as their own RFC 8785 bytes."""
    return b"[" + b",".join(items) + b"]"


def profile_digest(kind: str, value: Any) -> str:
    """A digest in one of this project's MCP-layer domains (spec/host-wiring.md)."""
    return digest(f"{PROFILE}/{kind}/v1", value)


def profile_digest_and_size(kind: str, body: dict[str, Any], field: str, *, raw: bytes | None = None
                            ) -> tuple[str, int]:
    """``profile_digest(kind, body)``, and the size of ``{**body, field: that digest}`` in canonical bytes as sent
    (without NFC normalisation): one serialisation serves both when the body is ASCII, as a response body
    usually is. The member adds its own text and one comma to the body's bytes, wherever its key sorts.

    ``raw``, when given, is ``canonical_bytes(body, normalize=False)`` already made, from its parts
    (``canonical_object``), so the body is not serialised again."""
    if field in body:  # the member would replace one, not add one: measured whole
        found = profile_digest(kind, body)
        return found, len(canonical_bytes({**body, field: found}, normalize=False))
    raw = canonical_bytes(body, normalize=False) if raw is None else raw
    found = _digest_of(f"{PROFILE}/{kind}/v1", raw if raw.isascii() else canonical_bytes(body))
    member = len(json.dumps(field, ensure_ascii=False).encode("utf-8")) + 1 + len(found) + 2  # "field":"sha256:…"
    return found, len(raw) + member + (1 if body else 0)


ZERO_DIGEST = "sha256:" + "0" * 64
