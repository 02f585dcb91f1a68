"""The advertised input schema behind a path, and the limits the cases are sized by."""

from __future__ import annotations

import functools
from typing import Any

from engram_mcp.contract import load

from .paths import Path
from .vocabulary import CAPTURE, GET, SEARCH, TOOLS

CONTRACT = load()
assert set(TOOLS) == set(CONTRACT.tools), "the contract's tool list changed"

ARGUMENTS_MAX_BYTES = CONTRACT.limit("arguments.max_bytes")
MAX_SAFE = CONTRACT.limit("safe_integer.max")
TEXT_MAX = CONTRACT.limit("capture.component.text.max_bytes")
COMPONENTS_MAX = CONTRACT.limit("capture.components.max")


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
