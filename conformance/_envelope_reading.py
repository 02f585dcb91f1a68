"""What the envelope.* checks read in a tool result: its text copy, JSON equality, and where a planted marker
comes back."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

from engram_mcp.conformance import _fuzz as fuzz
from engram_mcp.conformance._connect import Reply

SEARCH, GET = fuzz.SEARCH, fuzz.GET
# The members of a returned record that hold what the capturing caller wrote.
RECORD_CONTENT = frozenset({"purpose_ref", "valid_time", "components", "primary_component_id", "primary_event",
                            "citations", "retention", "reconciliation"})


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: numbers compare by value, but a boolean is never a number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def text_copy(result: dict[str, Any]) -> tuple[str | None, str]:
    """The first text content item, and what is wrong with the content list if anything."""
    content = result.get("content")
    if not isinstance(content, list):
        return None, "content is missing or not a list"
    texts = [item.get("text") for item in content if isinstance(item, dict) and item.get("type") == "text"]
    if not texts or not isinstance(texts[0], str):
        return None, "content holds no text item"
    return texts[0], ""


def hits(node: Any, needle: str, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths in a JSON value whose key or string value contains the needle (case-insensitively)."""
    if isinstance(node, str):
        if needle in node.lower():
            yield path
    elif isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and needle in key.lower():
                yield path + (key,)
            yield from hits(value, needle, path + (key,))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from hits(item, needle, path + (i,))


def record_content(tool: str) -> Callable[[tuple[Any, ...]], bool]:
    """Where a success of this tool may hold the caller's own material: inside a returned record."""

    def allowed(path: tuple[Any, ...]) -> bool:
        if tool == SEARCH:
            return (len(path) >= 6 and path[:3] == ("output", "value", "records") and isinstance(path[3], int)
                    and path[4] == "record" and path[5] in RECORD_CONTENT)
        if tool == GET:
            return len(path) >= 4 and path[:3] == ("output", "value", "record") and path[3] in RECORD_CONTENT
        return False

    return allowed


def reflections(reply: Reply, marker: str, allowed: Callable[[tuple[Any, ...]], bool] | None = None) -> list[str]:
    """Every place in a reply that repeats the marker, outside what ``allowed`` accepts."""
    needle = marker.lower()[:12]
    found: list[str] = []
    if reply.kind == "error":
        error = reply.error or {}
        if needle in str(error.get("message", "")).lower():
            found.append("the JSON-RPC error message")
        if needle in json.dumps(error.get("data"), default=str).lower():
            found.append("the JSON-RPC error data")
        return found
    result = reply.result or {}
    structured = result.get("structuredContent")
    ok = isinstance(structured, dict) and structured.get("ok") is True
    for path in hits(structured, needle):
        if not (ok and allowed is not None and allowed(path)):
            found.append("structuredContent/" + "/".join(str(p) for p in path))
    text, _ = text_copy(result)
    copy_is_faithful = False
    if text is not None:
        with contextlib.suppress(ValueError):
            copy_is_faithful = same_json(json.loads(text), structured)
    others = {k: v for k, v in result.items() if k not in ("structuredContent", "content")}
    if not copy_is_faithful and needle in json.dumps(result.get("content"), default=str).lower():
        found.append("the text content (which is not a faithful copy)")
    if needle in json.dumps(others, default=str).lower():
        found.append("the result outside its envelope")
    return found
