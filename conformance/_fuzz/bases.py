"""Valid bases: arguments the oracle accepts, with every optional member present.

Every case family starts from a base and changes one thing, so that the verdict
of a case speaks about that one thing. With every optional member present,
every object level exists for a family to reach into.
"""

from __future__ import annotations

from typing import Any

from engram_mcp.contract import canonical_bytes

from .paths import Path, get_at, put, rename, string_paths
from .schema import COMPONENTS_MAX, CONTRACT, TEXT_MAX
from .vocabulary import ADMIT, CAPTURE, DIGEST_A, DIGEST_B, FORGET, GET, SEARCH, WIDE, WITHDRAW

FAR_FUTURE = "9999-12-31T23:59:59.999Z"
DEFAULT_PURPOSE = "purpose:conformance"
FIXTURE_PURPOSE = "purpose:case"  # the purpose every fixture case is written with
UNKNOWN_RECORD = "mem_" + "q" * 52
UNKNOWN_CANDIDATE = "candidate_" + "c0ffee" * 10 + "0001"
CURSOR = "fuzzing-base-cursor"


def base_arguments(tool: str, purpose: str = DEFAULT_PURPOSE) -> dict[str, Any]:
    """Valid arguments with every optional member present. Every string value is distinct,
    so that an id can be renamed everywhere it is cited without touching anything else."""
    packet = CONTRACT.limit("max_packet_bytes.default")
    if tool == SEARCH:  # no page_cursor: an unknown cursor would end every valid case at STALE_PAGE
        return {"query": "fuzzing base query", "purpose_ref": purpose, "limit": 10, "max_packet_bytes": packet,
                "capability_policy": {"minimum_channels": "lexical", "network": "forbid"}}
    if tool == GET:
        return {"record_id": UNKNOWN_RECORD, "purpose_ref": purpose, "max_packet_bytes": packet}
    if tool == ADMIT:
        return {"candidate_id": UNKNOWN_CANDIDATE, "idempotency_key": "conformance-fuzz-admission-0001"}
    if tool == WITHDRAW:
        return {"candidate_id": UNKNOWN_CANDIDATE, "idempotency_key": "conformance-fuzz-withdraw-0001",
                "reason_ref": "reason:fuzzing"}
    if tool == FORGET:
        return {"record_id": UNKNOWN_RECORD, "idempotency_key": "conformance-fuzz-forget-0001",
                "reason_ref": "reason:fuzzing"}
    if tool == CAPTURE:
        return {
            "idempotency_key": "conformance-fuzz-capture-0001",
            "payload": {
                "schema_version": 2,
                "purpose_ref": purpose,
                "valid_time": {"t": 1_700_000_000_000, "t_end": 4_102_444_800_000},  # 2023 to 2100
                "components": [{"component_id": "component:primary", "kind": "decision",
                                "text": "Fuzzing base: keep the ledger in one database.",
                                "citation_ids": ["citation:first"]}],
                "primary_component_id": "component:primary",
                "primary_event": {"at": 1_700_000_000_000, "type_ref": "event:decided",
                                  "citation_id": "citation:first"},
                "citations": [{"citation_id": "citation:first", "source_ref": "source:fuzzing",
                               "locator": {"scheme": "document", "value": "fuzzing#1"},
                               "content_digest": DIGEST_A, "observed_at": "2026-01-02T03:04:05.678Z"}],
                "retention": {"derivative_rule": "make-ineligible"},
                "reconciliation": {"family_refs": []},
            },
            "evidence": {"evidence_ref": "evidence:fuzzing", "evidence_digest": DIGEST_B,
                         "citation_ids": ["citation:first"], "attestation": "Checked by the fuzzing base."},
        }
    raise ValueError(f"unknown tool {tool}")


def fill(nbytes: int, width: int) -> str:
    """NFC text of exactly nbytes UTF-8 bytes, as many width-byte characters as fit, then ASCII."""
    return WIDE[width] * (nbytes // width) + "a" * (nbytes % width)


def with_string(tool: str, base: dict[str, Any], path: Path, value: str) -> dict[str, Any]:
    """base with the string at path replaced; an id is replaced everywhere it is cited."""
    old = get_at(base, path)
    if tool == CAPTURE and any(name in path for name in ("component_id", "citation_id", "primary_component_id",
                                                        "citation_ids")):
        return rename(base, old, value)
    return put(base, path, value)


def distinct_string_fields(tool: str, base: dict[str, Any]) -> list[Path]:
    """One path per distinct string value (an id cited in several places counts once)."""
    seen: set[str] = set()
    paths = []
    for path in string_paths(base):
        value = get_at(base, path)
        if value not in seen:
            seen.add(value)
            paths.append(path)
    return paths


def string_fields(tool: str, base: dict[str, Any]) -> list[tuple[dict[str, Any], Path]]:
    """(base, path) for every distinct string field, search's page_cursor included."""
    fields = [(base, path) for path in distinct_string_fields(tool, base)]
    if tool == SEARCH:
        fields.append(({**base, "page_cursor": CURSOR}, ("page_cursor",)))
    return fields


def canonical_size(arguments: Any) -> int:
    """UTF-8 length of the RFC 8785 form, as the oracle measures it (no normalisation)."""
    return len(canonical_bytes(arguments, normalize=False))


# A filler character, its UTF-8 width and its canonical width (a control
# character is 1 byte of text but 6 bytes of canonical JSON, \u0001).
FILLERS = {"ascii": ("x", 1, 1), "4-byte": (WIDE[4], 4, 4), "control": ("\u0001", 1, 6)}


def sized_capture(total: int, filler: str = "ascii", *, purpose: str = DEFAULT_PURPOSE) -> dict[str, Any]:
    """Capture arguments of exactly ``total`` canonical bytes, padded with context components."""
    char, utf8_width, canonical_width = FILLERS[filler]
    args = base_arguments(CAPTURE, purpose)
    components = args["payload"]["components"]
    size = canonical_size(args)
    while size < total:
        if len(components) >= COMPONENTS_MAX:
            raise ValueError(f"cannot reach {total} bytes")
        pad: dict[str, Any] = {"component_id": f"component:pad-{len(components):02d}", "kind": "context", "text": "x",
                               "citation_ids": ["citation:first"]}
        components.append(pad)
        size += canonical_size(pad) + 1  # the component and its comma
        room = TEXT_MAX - 1  # UTF-8 bytes the text may still grow by
        count = min(room // utf8_width, max(0, total - size - 8) // canonical_width)
        pad["text"] += char * count
        size += count * canonical_width
        room -= count * utf8_width
        tail = min(room, max(0, total - size))  # ASCII: one canonical byte each
        pad["text"] += "x" * tail
        size += tail
    if size != total or canonical_size(args) != total:
        raise ValueError(f"cannot reach exactly {total} bytes")
    return args
