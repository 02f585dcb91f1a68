"""Family digests: near-misses of the digest format, alone and beside schema errors."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..bases import DEFAULT_PURPOSE, base_arguments
from ..case import Case, judged
from ..paths import drop, put
from ..registry import family
from ..vocabulary import CAPTURE, DIGEST_A, DIGEST_B, NFD_E

FAMILY = "digests"


DIGEST_NEAR_MISSES = (
    ("uppercase hex", "sha256:" + "A" * 64),
    ("one uppercase hex digit", "sha256:" + "a" * 63 + "F"),
    ("63 hex digits", "sha256:" + "a" * 63),
    ("65 hex digits", "sha256:" + "a" * 65),
    ("a trailing newline", DIGEST_A + "\n"),
    ("a leading space", " " + DIGEST_A),
    ("an uppercase prefix", "SHA256:" + "a" * 64),
    ("no prefix", "a" * 64),
    ("a non-hex digit", "sha256:" + "a" * 63 + "g"),
)


@family(FAMILY, tools=(CAPTURE,))
def digest_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    base = base_arguments(tool, purpose)
    fields = (("content_digest", ("payload", "citations", 0, "content_digest")),
              ("evidence_digest", ("evidence", "evidence_digest")))
    rows: list[tuple[str, Any, bool]] = []
    for name, path in fields:
        rows += [(f"{name} with {what}", put(base, path, value), False) for what, value in DIGEST_NEAR_MISSES]
        rows += [(f"{name} as an integer", put(base, path, 7), False),
                 (f"{name} missing", drop(base, path), False),
                 (f"{name} well formed (sha256: and 64 lowercase hex)",
                  put(base, path, "sha256:" + "0123456789abcdef" * 4), True)]
    content = fields[0][1]
    beside = (  # a digest near-miss together with a schema failure: INVALID_SCHEMA wins
        ("an unknown field", DIGEST_A.upper(), ("evidence", "note"), "x"),
        ("a non-NFC reference", DIGEST_A + "\n", ("payload", "primary_event", "type_ref"), f"event:caf{NFD_E}"),
        ("a dangling citation", "sha256:" + "a" * 63, ("evidence", "citation_ids"), ["citation:missing"]),
        ("a too-long idempotency key", DIGEST_B.upper(), ("idempotency_key",), "k" * 257),
    )
    rows += [(f"a digest near-miss beside {what}", put(put(base, content, digest), path, value), False)
             for what, digest, path, value in beside]
    return [judged(FAMILY, tool, label, args, now=now, intent=intent) for label, args, intent in rows]
