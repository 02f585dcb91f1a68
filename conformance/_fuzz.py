"""Argument cases for the closed-schema checks, generated apart from any target.

Generation never talks to a server: every function here returns plain
``Case`` values, so the cases a run would send can be listed and read before
(or without) sending them::

    python -m engram_mcp.conformance._fuzz --tool engram_memory_capture --family utf8-boundaries
    python -m engram_mcp.conformance._fuzz --family schemathesis-negative --seed 7 --examples 25

Each case carries the verdict of the shared argument oracle
(``engram_mcp.contract.ArgumentOracle``) at the time it was built: valid, or
invalid with the error code a server must send. A case whose verdict depends on
the clock (an expiry) is judged again at the moment it is sent. An invalid case
that only a profile pin refuses names it in ``pins`` (see ``_pins``).

Schema-driven cases are drawn with hypothesis under a fixed seed, ``--examples``
draws per tool and mode, so the same seed gives the same cases. Just before
sending, a check may put the bound purpose into a fixture case and give a valid
mutation case an idempotency key of its own (``bind_purpose``, ``salted_key``);
neither ever changes a verdict. ``--full`` prints arguments exactly, in a form
``Case.from_json`` reads back.

Families
--------
``fixtures``               the labelled corpus under fixtures/arguments/
``schemathesis-positive``  schema-driven valid arguments (schemathesis 4.32.5 over a
                           synthetic OpenAPI operation per tool), repaired for what a
                           JSON Schema cannot say (bytes, NFC, cross-references, order)
``schemathesis-negative``  schema mutations that the oracle judges invalid
``utf8-boundaries``        every byte-bounded string at its bounds and one byte beyond,
                           written with 1- to 4-byte characters
``nfc``                    NFC and non-NFC spellings of references, keys and free text
``lone-surrogates``        unencodable text in values and keys
``safe-integers``          2^53-1, 2^53, 1.5 and other non-integers wherever an integer goes
``zero-fractions``         1.0 and other integral numbers written with a fraction, wherever an integer goes
``digests``                near-misses of the digest format, alone and beside schema errors
``identifiers``            record and candidate id near-misses, each in the other's slot
``capture-shape``          capture's arrays at their item bounds and one beyond, unknown kinds, repeated ids
``cross-references``       capture's internal references, uniqueness and ordering rules
``instants``               instant shapes, real calendar times, an expiry after the capture
``host-owned-fields``      every host-owned name injected at every object level
``null``                   null at every property and in every array
``required``               every property left out, one at a time
``size-boundary``          arguments of exactly arguments.max_bytes canonical bytes, and one more
``non-object``             arguments that are not a JSON object
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import json
import math
import sys
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engram_mcp.conformance import _pins
from engram_mcp.contract import ArgumentOracle, canonical_bytes, load
from engram_mcp.contract.validation import utf16_key

CONTRACT = load()
SEARCH = "engram_memory_search"
GET = "engram_memory_get"
CAPTURE = "engram_memory_capture"
ADMIT = "engram_memory_request_admission"
WITHDRAW = "engram_memory_withdraw"
FORGET = "engram_memory_forget"
TOOLS = (SEARCH, GET, CAPTURE, ADMIT, WITHDRAW, FORGET)
assert set(TOOLS) == set(CONTRACT.tools), "the contract's tool list changed"

ARGUMENTS_MAX_BYTES = CONTRACT.limit("arguments.max_bytes")
MAX_SAFE = CONTRACT.limit("safe_integer.max")
TEXT_MAX = CONTRACT.limit("capture.component.text.max_bytes")
COMPONENTS_MAX = CONTRACT.limit("capture.components.max")
FAR_FUTURE = "9999-12-31T23:59:59.999Z"
DEFAULT_PURPOSE = "purpose:conformance"
FIXTURE_PURPOSE = "purpose:case"  # the purpose every fixture case is written with

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
UNKNOWN_RECORD = "mem_" + "q" * 52
UNKNOWN_CANDIDATE = "candidate_" + "c0ffee" * 10 + "0001"

# One NFC character of each UTF-8 width.
WIDE = {1: "a", 2: "\u00e9", 3: "\u20ac", 4: "\U0001f600"}
NFD_E = "e\u0301"  # the decomposed spelling of U+00E9
ANGSTROM = "\u212b"  # NFC maps it to U+00C5
JAMO = "\u1100\u1161"  # NFC composes it to U+AC00

# Host-owned context (§0, host profile 1.4), as the contract names it, and
# other spellings of the same things. Every name is refused at every level.
HOST_OWNED_NAMES = (
    "tenant", "workspace", "scope", "principal", "agent_id", "session", "credential", "auditId",
    "deadline", "cancellation", "confirmation", "confirmed", "elicitationRef", "trust", "decision", "status",
)
HOST_OWNED_SPELLINGS = ("tenantId", "scope_ref", "confirm", "request_state")
_HOST_VALUES: dict[str, Any] = {
    "confirmed": True, "confirm": True, "approved": True,
    "confirmation": {"approved": True}, "trust": {"class": "verified"}, "deadline": "2030-01-01T00:00:00.000Z",
}

_ORACLE: ArgumentOracle | None = None


def oracle() -> ArgumentOracle:
    global _ORACLE
    if _ORACLE is None:
        _ORACLE = ArgumentOracle()
    return _ORACLE


def utc_now() -> datetime:
    return datetime.now(UTC)


# -- cases ---------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Case:
    """One tools/call's arguments, with the oracle's verdict when the case was built."""

    family: str
    tool: str
    label: str
    arguments: Any
    valid: bool
    code: str | None  # the code a server must send when invalid
    rules: tuple[str, ...] = ()
    intent: bool | None = None  # what the generator meant (valid?), None when it did not say
    pins: tuple[str, ...] = ()  # profile pins the refusal rests on alone (see _pins): not required at contract level

    @property
    def unsendable(self) -> str | None:
        return unsendable(self.arguments)

    def as_json(self) -> dict[str, Any]:
        """A JSON form that from_json reads back exactly (raw bytes are written as hex)."""
        arguments = {"$bytes": bytes(self.arguments).hex()} if isinstance(self.arguments, bytes | bytearray) \
            else self.arguments
        return {"family": self.family, "tool": self.tool, "label": self.label, "valid": self.valid,
                "code": self.code, "rules": list(self.rules), "intent": self.intent, "pins": list(self.pins),
                "unsendable": self.unsendable, "arguments": arguments}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Case:
        arguments = record["arguments"]
        if isinstance(arguments, dict) and set(arguments) == {"$bytes"}:
            arguments = bytes.fromhex(arguments["$bytes"])
        return cls(record["family"], record["tool"], record["label"], arguments, record["valid"], record["code"],
                   tuple(record["rules"]), record["intent"], tuple(record.get("pins", ())))


def judged(family: str, tool: str, label: str, arguments: Any, *, now: datetime | None = None,
           intent: bool | None = None) -> Case:
    verdict = oracle().verdict(tool, arguments, now=now or utc_now())
    return Case(family, tool, label, arguments, verdict.valid, verdict.code,
                tuple(sorted(verdict.rules)), intent, pinned_by(tool, arguments, verdict.rules, now=now))


def pinned_by(tool: str, arguments: Any, rules: Any, *, now: datetime | None = None) -> tuple[str, ...]:
    """The profile pins a schema-keyword refusal rests on alone: the arguments are valid once they are relaxed."""
    if set(rules) != {"schema_keyword"}:
        return ()
    loose, pins = _pins.relaxed(tool, arguments)
    return pins if pins and oracle().verdict(tool, loose, now=now or utc_now()).valid else ()


LONE_SURROGATE = "a lone surrogate, which the SDK session cannot serialise"


def unsendable(arguments: Any) -> str | None:
    """Why these arguments cannot cross an MCP SDK session unchanged, or None.

    The SDK serialises requests with pydantic: raw bytes are no JSON at all, a
    lone surrogate cannot be encoded (and the failure closes the client's
    transport), and NaN or an infinity would silently become null.
    """
    if isinstance(arguments, bytes | bytearray):
        return "raw bytes, not JSON"
    for value in _all_values(arguments):
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return LONE_SURROGATE
        elif isinstance(value, float) and not math.isfinite(value):
            return "a non-finite number, which JSON cannot carry"
    return None


def _all_values(node: Any) -> Iterator[Any]:
    yield node
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _all_values(value)
    elif isinstance(node, list):
        for item in node:
            yield from _all_values(item)


# -- paths -------------------------------------------------------------------------

Path = tuple[str | int, ...]


def get_at(node: Any, path: Path) -> Any:
    for step in path:
        node = node[step]
    return node


def put(base: Any, path: Path, value: Any) -> Any:
    """A deep copy of base with the value at path set (added when missing)."""
    if not path:
        return copy.deepcopy(value)
    out = copy.deepcopy(base)
    get_at(out, path[:-1])[path[-1]] = copy.deepcopy(value)
    return out


def drop(base: Any, path: Path) -> Any:
    out = copy.deepcopy(base)
    del get_at(out, path[:-1])[path[-1]]
    return out


def rename(node: Any, old: str, new: str) -> Any:
    """A copy with every string value equal to old replaced by new (keys untouched)."""
    if isinstance(node, str):
        return new if node == old else node
    if isinstance(node, list):
        return [rename(item, old, new) for item in node]
    if isinstance(node, dict):
        return {key: rename(value, old, new) for key, value in node.items()}
    return node


def label_of(path: Path) -> str:
    text = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path)
    return text.lstrip(".") or "(arguments)"


def object_paths(node: Any, path: Path = ()) -> list[Path]:
    """Every path that holds a JSON object, the arguments themselves first."""
    found: list[Path] = []
    if isinstance(node, dict):
        found.append(path)
        for key, value in node.items():
            found += object_paths(value, path + (key,))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            found += object_paths(item, path + (i,))
    return found


def member_paths(node: Any, path: Path = ()) -> list[Path]:
    """Every object member, at every depth."""
    found: list[Path] = []
    if isinstance(node, dict):
        for key, value in node.items():
            found.append(path + (key,))
            found += member_paths(value, path + (key,))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            found += member_paths(item, path + (i,))
    return found


def array_paths(node: Any, path: Path = ()) -> list[Path]:
    found: list[Path] = []
    if isinstance(node, list):
        found.append(path)
        for i, item in enumerate(node):
            found += array_paths(item, path + (i,))
    elif isinstance(node, dict):
        for key, value in node.items():
            found += array_paths(value, path + (key,))
    return found


def string_paths(node: Any, path: Path = ()) -> list[Path]:
    found: list[Path] = []
    if isinstance(node, str):
        found.append(path)
    elif isinstance(node, dict):
        for key, value in node.items():
            found += string_paths(value, path + (key,))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            found += string_paths(item, path + (i,))
    return found


# -- the schema behind a path --------------------------------------------------------


def _merged(schema: Any) -> dict[str, Any]:
    """A schema with its allOf branches folded in (enough for the contract's inlined schemas)."""
    if not isinstance(schema, dict):
        return {}
    out = {k: v for k, v in schema.items() if k != "allOf"}
    for branch in schema.get("allOf", []):
        for key, value in _merged(branch).items():
            if key == "properties":
                out["properties"] = {**value, **out.get("properties", {})}
            else:
                out.setdefault(key, value)
    return out


@functools.cache
def _schema_at(tool: str, shape: tuple[str | None, ...]) -> dict[str, Any]:
    node = _merged(CONTRACT.advertised_input_schema(tool))
    for step in shape:
        node = _merged(node.get("items", {})) if step is None else _merged(node.get("properties", {}).get(step, {}))
    return node


def schema_at(tool: str, path: Path) -> dict[str, Any]:
    """The advertised input schema of the value at path (array indices ignored)."""
    return _schema_at(tool, tuple(None if isinstance(step, int) else step for step in path))


def byte_bounds(tool: str, path: Path) -> tuple[int, int | None] | None:
    bounds = schema_at(tool, path).get("x-utf8Bytes")
    return (bounds.get("minimum", 0), bounds.get("maximum")) if bounds else None


def is_nfc_field(tool: str, path: Path) -> bool:
    return bool(schema_at(tool, path).get("x-nfc"))


def is_patterned(tool: str, path: Path) -> bool:
    return "pattern" in schema_at(tool, path)


def is_free_text(tool: str, path: Path) -> bool:
    """A string the caller writes freely: no pattern, enum, constant or NFC requirement."""
    schema = schema_at(tool, path)
    return schema.get("type") == "string" and not {"pattern", "enum", "const", "x-nfc"} & set(schema)


def purpose_path(tool: str) -> Path | None:
    if tool == CAPTURE:
        return ("payload", "purpose_ref")
    return ("purpose_ref",) if tool in (SEARCH, GET) else None


# -- valid bases: every optional member present, so every object level exists -------------


def base_arguments(tool: str, purpose: str = DEFAULT_PURPOSE) -> dict[str, Any]:
    """Valid arguments with every optional member present. Every string value is distinct,
    so that an id can be renamed everywhere it is cited without touching anything else."""
    if tool == SEARCH:  # no page_cursor: an unknown cursor would end every valid case at STALE_PAGE
        return {"query": "fuzzing base query", "purpose_ref": purpose, "limit": 10, "max_packet_bytes": CONTRACT.limit("max_packet_bytes.default"),
                "capability_policy": {"minimum_channels": "lexical", "network": "forbid"}}
    if tool == GET:
        return {"record_id": UNKNOWN_RECORD, "purpose_ref": purpose, "max_packet_bytes": CONTRACT.limit("max_packet_bytes.default")}
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


def _distinct_string_fields(tool: str, base: dict[str, Any]) -> list[Path]:
    """One path per distinct string value (an id cited in several places counts once)."""
    seen: set[str] = set()
    paths = []
    for path in string_paths(base):
        value = get_at(base, path)
        if value not in seen:
            seen.add(value)
            paths.append(path)
    return paths


CURSOR = "fuzzing-base-cursor"


def _string_fields(tool: str, base: dict[str, Any]) -> list[tuple[dict[str, Any], Path]]:
    """(base, path) for every distinct string field, search's page_cursor included."""
    fields = [(base, path) for path in _distinct_string_fields(tool, base)]
    if tool == SEARCH:
        fields.append(({**base, "page_cursor": CURSOR}, ("page_cursor",)))
    return fields


# -- family: fixtures ---------------------------------------------------------------------


FIXTURE_SIZE_CAP = 32 * 1024  # canonical bytes; larger cases are the size-driven families' business


def fixture_cases(tool: str, *, everything: bool = False) -> list[Case]:
    """The shipped corpus, each case as labelled.

    Cases over FIXTURE_SIZE_CAP canonical bytes (texts and arrays at their
    bounds, arguments near arguments.max_bytes) are left out unless
    ``everything``: they cost the most to send, and the utf8-boundaries,
    capture-shape and size-boundary families send the same bounds anyway."""
    out = []
    for entry in CONTRACT.fixture(f"arguments/{tool}.json")["cases"]:
        if not everything and _rough_size(entry["arguments"]) > FIXTURE_SIZE_CAP:
            continue
        breaks = tuple(entry.get("breaks", ()))
        out.append(Case("fixtures", tool, entry["description"], entry["arguments"], entry["valid"],
                        entry.get("code"), breaks, entry["valid"], tuple(entry.get("pins", ()))))
    return out


def _rough_size(arguments: Any) -> int:
    """About the canonical size (exact for the corpus's plain data); it only sorts big from small."""
    return len(json.dumps(arguments, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))


# -- family: schemathesis -------------------------------------------------------------------


@functools.cache
def _openapi() -> Any:
    """Each tool's advertised input schema as the JSON body of a synthetic OpenAPI 3.1 operation."""
    import schemathesis

    document = {
        "openapi": "3.1.0",
        "info": {"title": "engram memory tools", "version": CONTRACT.version},
        "paths": {
            f"/tools/{tool}": {"post": {
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": CONTRACT.advertised_input_schema(tool)}}},
                "responses": {"200": {"description": "an envelope"}},
            }}
            for tool in TOOLS
        },
    }
    return schemathesis.openapi.from_dict(document)


@functools.cache
def _drawn(tool: str, mode: str, seed: int, examples: int) -> tuple[Any, ...]:
    """Request bodies drawn for one tool: the same for the same seed and count."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as fixed_seed
    from schemathesis import GenerationMode

    operation = _openapi()[f"/tools/{tool}"]["POST"]
    generation = GenerationMode.POSITIVE if mode == "positive" else GenerationMode.NEGATIVE
    bodies: list[Any] = []

    @fixed_seed(seed)
    @settings(max_examples=examples, database=None, deadline=None, derandomize=False, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet, report_multiple_bugs=False)
    @given(operation.as_strategy(generation_mode=generation))
    def collect(case: Any) -> None:
        body = getattr(case, "body", None)
        if type(body).__name__ != "NotSet":
            bodies.append(copy.deepcopy(body))

    collect()
    return tuple(bodies)


def _key(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return repr(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=True, default=repr)


def schemathesis_cases(tool: str, mode: str, *, seed: int, examples: int, purpose: str = DEFAULT_PURPOSE,
                       now: datetime | None = None) -> list[Case]:
    """Positive bodies repaired until the oracle judges them valid (others are dropped);
    negative bodies the oracle judges invalid (others are dropped). Duplicates are dropped."""
    now = now or utc_now()
    family = f"schemathesis-{mode}"
    out: list[Case] = []
    seen: set[str] = set()
    for i, body in enumerate(_drawn(tool, mode, seed, examples)):
        if mode == "positive":
            body = repair(tool, body, purpose=purpose, now=now)
            if body is None:
                continue
        elif isinstance(body, dict):
            body = bind_purpose(tool, body, purpose)
        key = _key(body)
        if key in seen:
            continue
        seen.add(key)
        if isinstance(body, bytes | bytearray):
            out.append(Case(family, tool, f"{mode} #{i}: raw bytes", bytes(body), False, "INVALID_SCHEMA", (), False))
            continue
        case = judged(family, tool, f"{mode} #{i}", body, now=now, intent=mode == "positive")
        if case.valid == (mode == "positive"):
            out.append(case)
    return out


def bind_purpose(tool: str, arguments: Any, purpose: str, *, only: str | None = None) -> Any:
    """The arguments with the bound purpose in the purpose slot, unless that could change the
    verdict: a case about the purpose itself keeps its purpose, and so does a case whose size
    would cross arguments.max_bytes with the new purpose. With ``only``, just that purpose is replaced."""
    path = purpose_path(tool)
    if path is None or not isinstance(arguments, dict):
        return arguments
    try:
        current = get_at(arguments, path)
    except (KeyError, IndexError, TypeError):
        return arguments
    if current == purpose or (only is not None and current != only):
        return arguments
    if not (_plain_ref(current) and _plain_ref(purpose)):
        return arguments
    changed = put(arguments, path, purpose)
    try:
        size = canonical_size(arguments)
        grown = size + len(canonical_bytes(purpose, normalize=False)) - len(canonical_bytes(current, normalize=False))
    except ValueError:
        return arguments
    return changed if (size <= ARGUMENTS_MAX_BYTES) == (grown <= ARGUMENTS_MAX_BYTES) else arguments


def _plain_ref(value: Any) -> bool:
    """A valid opaque reference (so swapping one for another cannot change a verdict by itself)."""
    if not isinstance(value, str):
        return False
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return 1 <= size <= 512 and unicodedata.is_normalized("NFC", value)


# -- repairing generated positives -----------------------------------------------------------

_INSTANT_FIELDS = ("observed_at", "expires_at")


def _truncate(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore")


def _calendar(text: str) -> str:
    """A real instant close to an instant-shaped string (fields clamped into range)."""
    try:
        year, month, day = int(text[0:4]), int(text[5:7]), int(text[8:10])
        hour, minute, second, milli = int(text[11:13]), int(text[14:16]), int(text[17:19]), text[20:23]
    except (ValueError, IndexError):
        return "2026-01-01T00:00:00.000Z"
    month = min(max(month, 1), 12)
    day = min(max(day, 1), 28)
    return f"{year:04d}-{month:02d}-{day:02d}T{min(hour, 23):02d}:{min(minute, 59):02d}:{min(second, 59):02d}.{milli}Z"


def _repair_strings(tool: str, arguments: Any) -> Any:
    out = copy.deepcopy(arguments)
    for path in string_paths(out):
        value = get_at(out, path)
        if path and path[-1] in _INSTANT_FIELDS:
            value = FAR_FUTURE if path[-1] == "expires_at" else _calendar(value)
        if is_nfc_field(tool, path):
            value = unicodedata.normalize("NFC", value)
        bounds = byte_bounds(tool, path)
        if bounds is not None:
            low, high = bounds
            if high is not None:
                value = _truncate(value, high)
            if is_nfc_field(tool, path):
                value = unicodedata.normalize("NFC", value)
                while high is not None and len(value.encode("utf-8")) > high:
                    value = _truncate(value[:-1], high)
            if len(value.encode("utf-8")) < low:
                value += "k" * (low - len(value.encode("utf-8")))
        get_at(out, path[:-1])[path[-1]] = value
    return out


def _unique(items: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def _repair_capture(arguments: dict[str, Any]) -> dict[str, Any]:
    """Make capture's internal references resolve and its ordered lists ordered."""
    out = copy.deepcopy(arguments)
    payload, evidence = out.get("payload"), out.get("evidence")
    if not isinstance(payload, dict):
        return out
    citations = [c for c in payload.get("citations", []) if isinstance(c, dict)]
    kept, ids = [], []
    for citation in citations:
        if citation.get("citation_id") not in ids:
            ids.append(citation.get("citation_id"))
            kept.append(citation)
    if kept:
        payload["citations"] = kept
    components = [c for c in payload.get("components", []) if isinstance(c, dict)]
    seen_components: list[Any] = []
    kept_components = []
    for component in components:
        if component.get("component_id") in seen_components:
            continue
        seen_components.append(component.get("component_id"))
        cited = _unique([cid for cid in component.get("citation_ids", []) if cid in ids])
        component["citation_ids"] = cited or ids[:1]
        kept_components.append(component)
    if kept_components:
        payload["components"] = kept_components
        if payload.get("primary_component_id") not in seen_components:
            payload["primary_component_id"] = kept_components[0].get("component_id")
        primary = next(c for c in kept_components if c.get("component_id") == payload["primary_component_id"])
        event = payload.get("primary_event")
        if isinstance(event, dict) and event.get("citation_id") not in primary["citation_ids"]:
            event["citation_id"] = primary["citation_ids"][0] if primary["citation_ids"] else None
    if isinstance(evidence, dict):
        cited = _unique([cid for cid in evidence.get("citation_ids", []) if cid in ids])
        evidence["citation_ids"] = cited or ids[:1]
    reconciliation = payload.get("reconciliation")
    if isinstance(reconciliation, dict) and isinstance(reconciliation.get("family_refs"), list):
        refs = [r for r in reconciliation["family_refs"] if isinstance(r, str)]
        reconciliation["family_refs"] = sorted(set(refs), key=utf16_key)
    valid_time = payload.get("valid_time")
    if isinstance(valid_time, dict) and isinstance(valid_time.get("t_end"), int | float) and \
            isinstance(valid_time.get("t"), int | float) and valid_time["t_end"] < valid_time["t"]:
        valid_time["t_end"] = valid_time["t"]
    return out


def repair(tool: str, arguments: Any, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> Any | None:
    """Schema-valid arguments made oracle-valid, or None when that fails.

    What a JSON Schema generator cannot see: byte lengths (truncated or padded),
    NFC (normalised), instants naming real times, an expiry in the future,
    capture's cross-references, unique ids and sorted family refs. The purpose
    is set to the bound one, so that valid cases reach execution.
    """
    if not isinstance(arguments, dict) or unsendable(arguments):
        return None
    out = arguments
    for _ in range(3):
        out = _repair_strings(tool, out)
        if tool == CAPTURE:
            out = _repair_capture(out)
        path = purpose_path(tool)
        if path is not None:
            try:
                get_at(out, path[:-1])[path[-1]] = purpose
            except (KeyError, TypeError):
                pass
        if oracle().verdict(tool, out, now=now or utc_now()).valid:
            return out
    return None


# -- family: utf8-boundaries ---------------------------------------------------------------


def utf8_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    out = []
    for base, path in _string_fields(tool, base_arguments(tool, purpose)):
        bounds = byte_bounds(tool, path)
        if bounds is None:
            continue
        low, high = bounds
        name = label_of(path)
        if high is not None:
            for width in (1, 2, 3, 4):
                out.append(judged("utf8-boundaries", tool, f"{name}: {high} bytes of {width}-byte characters",
                                  with_string(tool, base, path, fill(high, width)), now=now, intent=True))
            # One byte over: in ASCII (over maxLength too), and in characters few enough for maxLength
            # (a 4-byte run then one ASCII byte), which only a byte count refuses.
            for width in (1, 4):
                out.append(judged("utf8-boundaries", tool, f"{name}: {high + 1} bytes of {width}-byte characters",
                                  with_string(tool, base, path, fill(high + 1, width)), now=now, intent=False))
        if low > 1:
            for width in (1, 2, 3, 4):
                out.append(judged("utf8-boundaries", tool, f"{name}: {low} bytes of {width}-byte characters",
                                  with_string(tool, base, path, fill(low, width)), now=now, intent=True))
            for width in (1, 4):  # a 4-byte run passes minLength in characters; only the byte count refuses it
                out.append(judged("utf8-boundaries", tool, f"{name}: {low - 1} bytes of {width}-byte characters",
                                  with_string(tool, base, path, fill(low - 1, width)), now=now, intent=False))
        elif low == 1:
            out.append(judged("utf8-boundaries", tool, f"{name}: one 4-byte character",
                              with_string(tool, base, path, WIDE[4]), now=now, intent=True))
            out.append(judged("utf8-boundaries", tool, f"{name}: empty",
                              with_string(tool, base, path, ""), now=now, intent=False))
        else:
            out.append(judged("utf8-boundaries", tool, f"{name}: empty (no lower bound)",
                              with_string(tool, base, path, ""), now=now, intent=True))
    return out


# -- family: nfc ---------------------------------------------------------------------------


def nfc_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """A non-NFC reference or key is refused; the same spelling in free text is accepted."""
    out = []
    first_ref = True
    for base, path in _string_fields(tool, base_arguments(tool, purpose)):
        name = label_of(path)
        if is_nfc_field(tool, path):
            spellings = [("NFD (e + U+0301)", f"ref-caf{NFD_E}-0000000000")]
            if first_ref:
                spellings += [("U+212B ANGSTROM SIGN", f"ref-{ANGSTROM}-0000000000"),
                              ("decomposed Hangul jamo", f"ref-{JAMO}-0000000000")]
                first_ref = False
            for what, value in spellings:
                out.append(judged("nfc", tool, f"{name} in {what}", with_string(tool, base, path, value),
                                  now=now, intent=False))
            out.append(judged("nfc", tool, f"{name} in NFC (precomposed U+00E9)",
                              with_string(tool, base, path, "ref-caf\u00e9-0000000000"), now=now, intent=True))
        elif is_free_text(tool, path):  # free text and opaque cursors need not be NFC
            for what, value in (("NFD (e + U+0301)", f"d{NFD_E}cision document{NFD_E}e"),
                                ("U+212B ANGSTROM SIGN", f"{ANGSTROM}ngstr\u00f6m units")):
                out.append(judged("nfc", tool, f"{name} (free text) in {what}", with_string(tool, base, path, value),
                                  now=now, intent=True))
    return out


# -- family: lone-surrogates -----------------------------------------------------------------


def surrogate_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    base = base_arguments(tool, purpose)
    out = []
    for holder, path in _string_fields(tool, base):
        if not (is_free_text(tool, path) or is_nfc_field(tool, path)):
            continue
        out.append(judged("lone-surrogates", tool, f"{label_of(path)} holding U+D800",
                          with_string(tool, holder, path, "text-\ud800-0000000000"), now=now, intent=False))
    out.append(judged("lone-surrogates", tool, "an object key holding U+DC00",
                      put(base, ("key-\udc00",), "value"), now=now, intent=False))
    return out


# -- family: safe-integers ---------------------------------------------------------------------


def integer_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """Integers at and beyond ±(2^53-1), and numbers that are not integers, wherever an integer goes."""
    base = base_arguments(tool, purpose)
    rows: list[tuple[str, Any, bool]] = []
    if tool == CAPTURE:
        vt, at = ("payload", "valid_time"), ("payload", "primary_event", "at")
        rows += [
            ("valid_time t and t_end at 2^53-1", put(base, vt, {"t": MAX_SAFE, "t_end": MAX_SAFE}), True),
            ("valid_time from -(2^53-1) to 2^53-1", put(base, vt, {"t": -MAX_SAFE, "t_end": MAX_SAFE}), True),
            ("valid_time.t at 2^53", put(base, vt, {"t": MAX_SAFE + 1}), False),
            ("valid_time.t at -2^53", put(base, vt, {"t": -MAX_SAFE - 1}), False),
            ("valid_time.t_end at 2^53", put(base, vt, {"t": 0, "t_end": MAX_SAFE + 1}), False),
            ("valid_time.t at 2^64", put(base, vt, {"t": 2**64}), False),
            ("valid_time.t 1.5", put(base, vt, {"t": 1.5}), False),
            ("valid_time.t 1e16 (a float beyond 2^53)", put(base, vt, {"t": 1e16}), False),
            ("valid_time.t the string 1", put(base, vt, {"t": "1"}), False),
            ("valid_time.t true", put(base, vt, {"t": True}), False),
            ("primary_event.at at 2^53-1", put(base, at, MAX_SAFE), True),
            ("primary_event.at at -(2^53-1)", put(base, at, -MAX_SAFE), True),
            ("primary_event.at at 2^53", put(base, at, MAX_SAFE + 1), False),
            ("primary_event.at at 2^53+1", put(base, at, MAX_SAFE + 2), False),
            ("primary_event.at 0.5", put(base, at, 0.5), False),
            ("schema_version 2.5", put(base, ("payload", "schema_version"), 2.5), False),
        ]
    if tool == SEARCH:
        rows += [
            ("limit 2^53", put(base, ("limit",), MAX_SAFE + 1), False),
            ("limit 10.5", put(base, ("limit",), 10.5), False),
        ]
    if tool in (SEARCH, GET):
        rows += [
            ("max_packet_bytes 2^53", put(base, ("max_packet_bytes",), MAX_SAFE + 1), False),
            ("max_packet_bytes 4096.5", put(base, ("max_packet_bytes",), 4096.5), False),
        ]
    return [judged("safe-integers", tool, label, args, now=now, intent=intent) for label, args, intent in rows]


def zero_fraction_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """A number with a zero fraction (1.0) where an integer goes: accepted, as the integer it equals."""
    base = base_arguments(tool, purpose)
    rows: list[tuple[str, Any]] = []
    if tool == CAPTURE:
        vt = ("payload", "valid_time")
        rows += [
            ("valid_time t 1.0 and t_end 1.0", put(base, vt, {"t": 1.0, "t_end": 1.0})),
            ("valid_time t 1.0 and t_end 2", put(base, vt, {"t": 1.0, "t_end": 2})),
            ("primary_event.at 1.0", put(base, ("payload", "primary_event", "at"), 1.0)),
            ("schema_version 2.0", put(base, ("payload", "schema_version"), 2.0)),
        ]
    if tool == SEARCH:
        rows += [("limit 1.0", put(base, ("limit",), 1.0)), ("limit 50.0", put(base, ("limit",), 50.0))]
    if tool in (SEARCH, GET):
        rows += [("max_packet_bytes 4096.0", put(base, ("max_packet_bytes",), 4096.0)),
                 ("max_packet_bytes 1048576.0", put(base, ("max_packet_bytes",), 1048576.0))]
    return [judged("zero-fractions", tool, label, args, now=now, intent=True) for label, args in rows]


# -- family: digests -------------------------------------------------------------------------

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


def digest_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    if tool != CAPTURE:
        return []
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
    return [judged("digests", tool, label, args, now=now, intent=intent) for label, args, intent in rows]


# -- family: identifiers ------------------------------------------------------------------------


def identifier_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    base = base_arguments(tool, purpose)
    body = "y5lyhrr2w42rak7rz6h3gypy53rhohj2zszdhj7gpqzvjnijiqkq"
    hexpart = "7c2147c69a1394198962533640d865bc4f2fdf8f6b1e753e8ad28856d4a5e285"
    rows: list[tuple[str, Any, bool]] = []
    if tool in (GET, FORGET):
        slot = ("record_id",)
        rows += [
            ("a well-formed record id that was never issued", "mem_" + body, True),
            ("record id of one base32 character", "mem_a", True),
            ("uppercase body", "mem_" + body.upper(), False),
            ("uppercase prefix", "MEM_" + body, False),
            ("digit 0 (outside base32)", "mem_" + body[:-1] + "0", False),
            ("digit 1 (outside base32)", "mem_" + body[:-1] + "1", False),
            ("digit 8 (outside base32)", "mem_" + body[:-1] + "8", False),
            ("digit 9 (outside base32)", "mem_" + body[:-1] + "9", False),
            ("no mem_ prefix", body, False),
            ("a trailing newline", "mem_" + body + "\n", False),
            ("base32 padding", "mem_" + body + "====", False),
            ("a candidate_id in place of a record_id", "candidate_" + hexpart, False),
            ("an integer", 7, False),
        ]
    elif tool in (ADMIT, WITHDRAW):
        slot = ("candidate_id",)
        rows += [
            ("a well-formed candidate id that was never issued", "candidate_" + hexpart, True),
            ("uppercase hex", "candidate_" + hexpart.upper(), False),
            ("63 hex digits", "candidate_" + hexpart[:-1], False),
            ("65 hex digits", "candidate_" + hexpart + "0", False),
            ("no candidate_ prefix", hexpart, False),
            ("a trailing newline", "candidate_" + hexpart + "\n", False),
            ("a record_id in place of a candidate_id", "mem_" + body, False),
            ("an integer", 7, False),
        ]
    else:
        return []
    return [judged("identifiers", tool, f"{slot[0]}: {label}", put(base, slot, value), now=now, intent=intent)
            for label, value, intent in rows]


# -- family: capture-shape --------------------------------------------------------------------------


def capture_shape_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """Capture's arrays at their item bounds and one beyond, unknown kinds, repeated ids in id lists."""
    if tool != CAPTURE:
        return []
    base = base_arguments(tool, purpose)
    P = ("payload",)
    first = base["payload"]["components"][0]
    citation = base["payload"]["citations"][0]

    def components(n: int) -> dict[str, Any]:
        items = [first] + [{"component_id": f"component:{i:02d}", "kind": "context", "text": f"Part {i}.",
                            "citation_ids": ["citation:first"]} for i in range(1, n)]
        return put(base, P + ("components",), items)

    def citations(n: int) -> dict[str, Any]:
        items = [citation] + [{**citation, "citation_id": f"citation:{i:03d}"} for i in range(1, n)]
        return put(base, P + ("citations",), items)

    many = [f"citation:{i:03d}" for i in range(1, 257)]
    families = P + ("reconciliation", "family_refs")
    rows: list[tuple[str, Any, bool]] = [
        ("no components", put(base, P + ("components",), []), False),
        ("64 components", components(64), True),
        ("65 components", components(65), False),
        ("a component of kind note", put(base, P + ("components", 0, "kind"), "note"), False),
        ("a component citing nothing", put(base, P + ("components", 0, "citation_ids"), []), False),
        ("a component citing one citation twice",
         put(base, P + ("components", 0, "citation_ids"), ["citation:first", "citation:first"]), False),
        ("no citations", put(base, P + ("citations",), []), False),
        ("256 citations", citations(256), True),
        ("257 citations", citations(257), False),
        ("a component citing 257 citation ids", put(base, P + ("components", 0, "citation_ids"), ["citation:first", *many]),
         False),
        ("evidence naming 257 citation ids", put(base, ("evidence", "citation_ids"), ["citation:first", *many]), False),
        ("a citation whose locator has no value", put(base, P + ("citations", 0, "locator"), {"scheme": "document"}), False),
        ("a citation without a locator", drop(base, P + ("citations", 0, "locator")), False),
        ("evidence naming no citation", put(base, ("evidence", "citation_ids"), []), False),
        ("evidence naming one citation twice", put(base, ("evidence", "citation_ids"), ["citation:first"] * 2), False),
        ("64 family refs", put(base, families, [f"family:{i:02d}" for i in range(64)]), True),
        ("65 family refs", put(base, families, [f"family:{i:02d}" for i in range(65)]), False),
        ("no family refs", put(base, families, []), True),
    ]
    return [judged("capture-shape", tool, label, args, now=now, intent=intent) for label, args, intent in rows]


# -- family: cross-references ---------------------------------------------------------------------


def cross_reference_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    if tool != CAPTURE:
        return []
    base = base_arguments(tool, purpose)
    P = ("payload",)
    second = {"citation_id": "citation:second", "source_ref": "source:second",
              "locator": {"scheme": "document", "value": "fuzzing#2"}, "content_digest": DIGEST_B}
    two = put(base, P + ("citations",), [base["payload"]["citations"][0], second])
    families = P + ("reconciliation", "family_refs")
    cited = P + ("components", 0, "citation_ids")
    rows: list[tuple[str, Any, bool]] = [
        ("a component citing an unknown citation", put(base, cited, ["citation:first", "citation:missing"]), False),
        ("primary_component_id naming no component",
         put(base, P + ("primary_component_id",), "component:missing"), False),
        ("primary_event citing an unknown citation",
         put(base, P + ("primary_event", "citation_id"), "citation:missing"), False),
        ("primary_event citing a citation outside the primary component",
         put(two, P + ("primary_event", "citation_id"), "citation:second"), False),
        ("primary_event citing the primary component's second citation",
         put(put(two, P + ("components", 0, "citation_ids"), ["citation:first", "citation:second"]),
             P + ("primary_event", "citation_id"), "citation:second"), True),
        ("evidence naming an unknown citation", put(base, ("evidence", "citation_ids"), ["citation:missing"]), False),
        ("evidence naming a component id", put(base, ("evidence", "citation_ids"), ["component:primary"]), False),
        ("evidence naming a subset of two citations", put(two, ("evidence", "citation_ids"), ["citation:second"]), True),
        ("two citations sharing a citation_id",
         put(base, P + ("citations",), [second | {"citation_id": "citation:first"}, base["payload"]["citations"][0]]),
         False),
        ("two components sharing a component_id",
         put(base, P + ("components",), base["payload"]["components"] * 2), False),
        ("family refs out of order", put(base, families, ["family:beta", "family:alpha"]), False),
        ("family refs repeated", put(base, families, ["family:alpha", "family:alpha"]), False),
        ("family refs sorted", put(base, families, ["family:alpha", "family:beta"]), True),
        ("family refs in UTF-16 order (U+1F600 before U+FF01; code-point order differs)",
         put(base, families, ["family:\U0001f600", "family:\uff01"]), True),
        ("family refs in code-point order (U+FF01 before U+1F600)",
         put(base, families, ["family:\uff01", "family:\U0001f600"]), False),
        ("valid_time.t_end one before t",
         put(base, P + ("valid_time",), {"t": 1_700_000_000_000, "t_end": 1_699_999_999_999}), False),
        ("valid_time.t_end equal to t", put(base, P + ("valid_time",), {"t": 5, "t_end": 5}), True),
    ]
    return [judged("cross-references", tool, label, args, now=now, intent=intent) for label, args, intent in rows]


# -- family: instants --------------------------------------------------------------------------------


def instant_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """Instants: shape, calendar, and an expiry strictly after the capture time."""
    if tool != CAPTURE:
        return []
    base = base_arguments(tool, purpose)
    observed = ("payload", "citations", 0, "observed_at")
    retention = ("payload", "retention")
    rows: list[tuple[str, Any, bool]] = [
        (f"observed_at {what}", put(base, observed, value), valid) for what, value, valid in (
            ("on a leap day", "2024-02-29T23:59:59.999Z", True),
            ("at the first millisecond of year 0000", "0000-01-01T00:00:00.000Z", True),
            ("on 29 February of a common year", "2026-02-29T12:00:00.000Z", False),
            ("on 31 April", "2026-04-31T12:00:00.000Z", False),
            ("at hour 24", "2026-08-16T24:00:00.000Z", False),
            ("at minute 60", "2026-08-16T23:60:00.000Z", False),
            ("at second 60", "2016-12-31T23:59:60.000Z", False),
            ("without milliseconds", "2026-08-16T12:00:00Z", False),
            ("with a +00:00 offset", "2026-08-16T12:00:00.000+00:00", False),
            ("with a trailing newline", "2026-08-16T12:00:00.000Z\n", False),
        )
    ]
    rows += [
        (f"expires_at {what}", put(base, retention, {"derivative_rule": "make-ineligible", "expires_at": value}), valid)
        for what, value, valid in (("far in the future", FAR_FUTURE, True),
                                   ("in the past", "2001-01-01T00:00:00.000Z", False),
                                   ("on a day that does not exist", "2099-02-29T00:00:00.000Z", False))
    ]
    return [judged("instants", tool, label, args, now=now, intent=intent) for label, args, intent in rows]


# -- family: host-owned-fields ---------------------------------------------------------------------


def host_owned_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """Each host-owned name at each object level; other spellings at the top level."""
    base = base_arguments(tool, purpose)
    out = []
    for level in object_paths(base):
        for name in HOST_OWNED_NAMES:
            value = _HOST_VALUES.get(name, f"{name}:injected")
            out.append(judged("host-owned-fields", tool, f"{name} in {label_of(level)}",
                              put(base, level + (name,), value), now=now, intent=False))
    for name in HOST_OWNED_SPELLINGS:
        out.append(judged("host-owned-fields", tool, f"{name} in (arguments)",
                          put(base, (name,), _HOST_VALUES.get(name, f"{name}:injected")), now=now, intent=False))
    return out


# -- family: null and required ------------------------------------------------------------------------


def null_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    base = base_arguments(tool, purpose)
    out = [judged("null", tool, f"{label_of(path)}: null", put(base, path, None), now=now, intent=False)
           for path in member_paths(base)]
    out += [judged("null", tool, f"{label_of(path)}: a null item", put(base, path, [*get_at(base, path), None]),
                   now=now, intent=False)
            for path in array_paths(base)]
    return out


def required_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """Each member left out: a required one is refused, an optional one is not."""
    base = base_arguments(tool, purpose)
    out = []
    for path in member_paths(base):
        parent = schema_at(tool, path[:-1])
        required = path[-1] in parent.get("required", [])
        out.append(judged("required", tool, f"{label_of(path)} left out ({'required' if required else 'optional'})",
                          drop(base, path), now=now, intent=not required))
    return out


# -- family: size-boundary ---------------------------------------------------------------------------


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
        pad = {"component_id": f"component:pad-{len(components):02d}", "kind": "context", "text": "x",
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


def size_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """At exactly arguments.max_bytes a capture is valid; one byte more is refused, for every tool.

    Only capture can be valid that large: every other tool's strings are bounded
    far below it, so for them only the oversized case is meaningful.
    """
    out = []
    if tool == CAPTURE:
        # 4-byte text catches a size measured on ASCII-escaped JSON (too strict at the limit); control
        # characters, 1 byte of text but 6 of canonical JSON, catch a size measured on the text (too lax).
        for filler, sizes in (("ascii", (0, 1)), ("4-byte", (0,)), ("control", (0, 1))):
            for over in sizes:
                total = ARGUMENTS_MAX_BYTES + over
                what = "exactly" if not over else "one byte over:"
                out.append(judged("size-boundary", tool, f"{what} {total} canonical bytes ({filler} text)",
                                  sized_capture(total, filler, purpose=purpose), now=now, intent=not over))
        return out
    base = base_arguments(tool, purpose)
    path = {SEARCH: ("query",), GET: ("record_id",)}.get(tool, ("idempotency_key",))
    args = put(base, path, get_at(base, path) + "a" * (ARGUMENTS_MAX_BYTES + 1 - canonical_size(base)))
    out.append(judged("size-boundary", tool, f"{ARGUMENTS_MAX_BYTES + 1} canonical bytes (an overlong {path[0]})",
                      args, now=now, intent=False))
    return out


# -- family: non-object -----------------------------------------------------------------------------


def non_object_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    base = base_arguments(tool, purpose)
    rows = [("an empty object", {}), ("an empty array", []), ("an array holding valid arguments", [base]),
            ("a JSON string of valid arguments", json.dumps(base)), ("the number 0", 0), ("the number 1.5", 1.5),
            ("true", True), ("null (the SDK then sends no arguments)", None)]
    return [judged("non-object", tool, f"arguments: {label}", args, now=now, intent=False) for label, args in rows]


# -- planted markers (for the no-reflection checks) ----------------------------------------------------


@dataclass(frozen=True, eq=False)
class Planted:
    """Arguments carrying a marker; ``valid`` says whether the oracle accepts them."""

    label: str
    arguments: Any
    valid: bool


def _marked_everywhere(tool: str, base: dict[str, Any], marker: str, paths: list[Path]) -> dict[str, Any]:
    out = base
    for n, path in enumerate(paths):
        out = with_string(tool, out, path, f"{marker}-{n:02d}")
    return out


def marker_cases(tool: str, marker: str, *, purpose: str = DEFAULT_PURPOSE) -> list[Planted]:
    """Arguments with a marker planted in every string the caller writes, valid and not.

    The marker should be plain lowercase ASCII (letters and digits), at least 12
    characters, so that it survives any escaping and can be searched for as a word.
    """
    base = base_arguments(tool, purpose)
    own = purpose_path(tool)
    free = [p for p in _distinct_string_fields(tool, base)
            if p != own and (is_free_text(tool, p) or is_nfc_field(tool, p))]
    patterned = [p for p in _distinct_string_fields(tool, base) if is_patterned(tool, p)]
    deepest = max(object_paths(base), key=len)
    rows: list[tuple[str, Any]] = []
    if free:
        rows.append(("the marker in every free field", _marked_everywhere(tool, base, marker, free)))
    for path in patterned:
        rows.append((f"the marker as {label_of(path)}", with_string(tool, base, path, marker)))
    rows += [
        ("an unknown member named and valued with the marker", put(base, (marker,), marker)),
        (f"an unknown member in {label_of(deepest)}", put(base, deepest + (f"note_{marker}",), marker)),
        ("a host-owned member valued with the marker", put(base, ("tenant",), marker)),
    ]
    for path in free[:1] + ([own] if own else []):
        rows.append((f"{label_of(path)} far over its bound, repeating the marker",
                     with_string(tool, base, path, (marker + " ") * 1700)))
    references = [p for p in free if is_nfc_field(tool, p)] or ([own] if own else [])
    if references:
        rows.append((f"{label_of(references[0])} in NFD around the marker",
                     with_string(tool, base, references[0], f"{marker}-caf{NFD_E}")))
    if own is not None:
        rows.append(("the marker as a purpose other than the bound one", put(base, own, marker)))
    if tool == SEARCH:
        rows.append(("the marker as a page cursor", put(base, ("page_cursor",), marker)))
    if tool == CAPTURE:
        rows.append(("the marker as a family nobody consented to",
                     put(base, ("payload", "reconciliation", "family_refs"), [f"family:{marker}"])))
    checker = oracle()
    return [Planted(label, args, checker.verdict(tool, args, now=utc_now()).valid) for label, args in rows]


# -- registry ---------------------------------------------------------------------------------------

Generator = Callable[..., list[Case]]
FAMILIES: dict[str, Generator] = {
    "utf8-boundaries": utf8_cases,
    "nfc": nfc_cases,
    "lone-surrogates": surrogate_cases,
    "safe-integers": integer_cases,
    "zero-fractions": zero_fraction_cases,
    "digests": digest_cases,
    "identifiers": identifier_cases,
    "capture-shape": capture_shape_cases,
    "cross-references": cross_reference_cases,
    "instants": instant_cases,
    "host-owned-fields": host_owned_cases,
    "null": null_cases,
    "required": required_cases,
    "size-boundary": size_cases,
    "non-object": non_object_cases,
}
ALL_FAMILIES = ("fixtures", "schemathesis-positive", "schemathesis-negative", *FAMILIES)


def cases(family: str, tool: str, *, seed: int = 0, examples: int = 25, purpose: str = DEFAULT_PURPOSE,
          now: datetime | None = None) -> list[Case]:
    """The cases of one family for one tool."""
    if family == "fixtures":
        return fixture_cases(tool)
    if family.startswith("schemathesis-"):
        return schemathesis_cases(tool, family.removeprefix("schemathesis-"), seed=seed, examples=examples,
                                  purpose=purpose, now=now)
    return FAMILIES[family](tool, purpose=purpose, now=now)


# -- sending helpers (pure: the checks call them right before sending) ---------------------------------

_POOLS = {
    1: "abcdefghijklmnopqrstuvwxyz0123456789",
    2: "".join(chr(c) for c in range(0xC0, 0x100) if c not in (0xD7, 0xF7)),
    3: "".join(chr(c) for c in range(0x4E00, 0x4E00 + 256)),
    4: "".join(chr(c) for c in range(0x1F600, 0x1F650)),
}


def salted_key(key: str, salt: str) -> str:
    """A different key with the same UTF-8 width per character, still NFC when the key was.

    Valid mutation cases carry salted keys so that no case replays another (or
    one of an earlier run) and every case is judged on its own arguments.
    """
    if not unicodedata.is_normalized("NFC", key):
        return key
    digest = hashlib.sha256(f"{salt}\0{key}".encode("utf-8", "surrogatepass")).digest()
    out = []
    for i, char in enumerate(key):
        pool = _POOLS[len(char.encode("utf-8", "surrogatepass"))]
        out.append(pool[(digest[i % len(digest)] + 7 * i) % len(pool)])
    salted = "".join(out)
    return salted if unicodedata.is_normalized("NFC", salted) else key


def with_salted_key(tool: str, arguments: Any, salt: str) -> Any:
    if isinstance(arguments, dict) and isinstance(arguments.get("idempotency_key"), str) and \
            CONTRACT.tools[tool].idempotent:
        try:
            return {**arguments, "idempotency_key": salted_key(arguments["idempotency_key"], salt)}
        except UnicodeEncodeError:
            return arguments
    return arguments


def shorten(value: Any, limit: int = 60) -> Any:
    """A printable digest of arguments: long strings show their length, long lists their size."""
    if isinstance(value, str):
        return value if len(value) <= limit else f"<{len(value)} chars: {value[:24]!r}…>"
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} raw bytes>"
    if isinstance(value, list):
        items = [shorten(v, limit) for v in value[:4]]
        return items + [f"<… {len(value) - 4} more items>"] if len(value) > 4 else items
    if isinstance(value, dict):
        return {shorten(k, limit): shorten(v, limit) for k, v in value.items()}
    return value


def describe(arguments: Any, limit: int = 600) -> str:
    text = json.dumps(shorten(arguments), ensure_ascii=True, default=repr)
    return text if len(text) <= limit else text[:limit] + "…"


# -- inspection ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engram_mcp.conformance._fuzz",
        description="Print the argument cases the conformance checks would send, as JSON lines.")
    parser.add_argument("--tool", action="append", choices=TOOLS, help="only this tool (repeatable)")
    parser.add_argument("--family", action="append", choices=ALL_FAMILIES, help="only this family (repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--examples", type=int, default=25)
    parser.add_argument("--purpose", default=DEFAULT_PURPOSE, help="the purpose the host binds")
    parser.add_argument("--full", action="store_true", help="print arguments in full (Case.from_json reads them back)")
    args = parser.parse_args(argv)
    for family in args.family or ALL_FAMILIES:
        for tool in args.tool or TOOLS:
            for case in cases(family, tool, seed=args.seed, examples=args.examples, purpose=args.purpose):
                record = case.as_json()
                if not args.full:
                    record["arguments"] = shorten(case.arguments)
                sys.stdout.write(json.dumps(record, ensure_ascii=True, default=repr) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
