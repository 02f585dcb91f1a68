"""Helpers the checks call right before sending a case, and printable digests of arguments.

Pure functions: none of them asks a server anything, and none changes a verdict.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from typing import Any

from engram_mcp.conformance._words import spoken

from .schema import CONTRACT

_POOLS = {
    1: "abcdefghijklmnopqrstuvwxyz0123456789",
    2: "".join(chr(c) for c in range(0xC0, 0x100) if c not in (0xD7, 0xF7)),
    3: "".join(chr(c) for c in range(0x4E00, 0x4E00 + 256)),
    4: "".join(chr(c) for c in range(0x1F600, 0x1F650)),
}


SALTED_PREFIX = 64  # characters replaced: enough to set keys apart; a long key keeps the rest as it was


def salted_key(key: str, salt: str) -> str:
    """A different key with the same UTF-8 width per character, still NFC when the key was: its first
    ``SALTED_PREFIX`` characters are drawn from the salt and the whole key.

    Valid mutation cases carry salted keys so that no case replays another (or
    one of an earlier run) and every case is judged on its own arguments.
    """
    if not unicodedata.is_normalized("NFC", key):
        return key
    digest = hashlib.sha256(f"{salt}\0{key}".encode("utf-8", "surrogatepass")).digest()
    out = []
    for i, char in enumerate(key[:SALTED_PREFIX]):
        pool = _POOLS[len(char.encode("utf-8", "surrogatepass"))]
        out.append(pool[(digest[i % len(digest)] + 7 * i) % len(pool)])
    salted = "".join(out) + key[SALTED_PREFIX:]
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
        return value if len(value) <= limit else f"<{len(value)} chars: {spoken(value[:24])}…>"
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

