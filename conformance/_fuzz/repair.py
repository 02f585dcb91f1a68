"""Repairing drawn arguments, and binding the purpose a host binds.

A JSON Schema generator draws arguments the schema accepts but the contract may
not (byte lengths, NFC, real instants, capture's cross-references): ``repair``
makes them valid or gives up. ``bind_purpose`` puts the bound purpose into a
case without ever changing its verdict.
"""

from __future__ import annotations

import contextlib
import copy
import unicodedata
from datetime import datetime
from typing import Any

from engram_mcp.contract import canonical_bytes
from engram_mcp.contract.validation import utf16_key

from .bases import DEFAULT_PURPOSE, FAR_FUTURE, canonical_size
from .case import oracle, unsendable, utc_now
from .paths import get_at, put, string_paths
from .schema import ARGUMENTS_MAX_BYTES, byte_bounds, is_nfc_field, purpose_path
from .vocabulary import CAPTURE


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
            with contextlib.suppress(KeyError, TypeError):  # no purpose slot left to fill: the oracle decides
                get_at(out, path[:-1])[path[-1]] = purpose
        if oracle().verdict(tool, out, now=now or utc_now()).valid:
            return out
    return None

