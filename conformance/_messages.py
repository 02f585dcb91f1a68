"""What a sanitised error message must not hold.

The contract asks for constant, sanitised texts per code and gives none of its
own, so a target's wording is free. What is judged: one text per code over a
run (checked by the caller), and no text that carries what a sanitised message
never would — the caller's own values, a file or JSON path, a stack trace, an
exception's name or a memory address.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

# Shortest argument string looked for in a message: shorter ones (a limit, "p", "en") are too common to mean an echo.
ECHO_MIN_CHARS = 8

SIGNS = [
    (re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\", line \d+"), "a stack trace"),
    (re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception)\b"), "an exception name"),
    (re.compile(r"(?:^|[\s'\"(=:])(?:~|\.{1,2})?(?:/[\w.@+-]+){2,}/?"), "a file or JSON path"),
    (re.compile(r"\b[A-Za-z]:\\[\w\\. -]+"), "a file path"),
    (re.compile(r"\b[\w-]+\.(?:py|js|ts|go|rs|java|rb|sqlite3?|db)\b"), "a source or data file name"),
    (re.compile(r"\$\.[A-Za-z_]|#/[A-Za-z_$]"), "a JSON path"),
    (re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "a memory address"),
]


def leak(message: str) -> str | None:
    """What the message holds that a sanitised text never would, or None."""
    for pattern, what in SIGNS:
        if pattern.search(message):
            return what
    return None


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def _schema_words() -> frozenset[str]:
    """The enum and const strings of the input schemas: a constant text may name them without echoing anyone."""
    from engram_mcp.contract import load

    contract = load()
    words: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "enum" and isinstance(value, list):
                    words.update(v for v in value if isinstance(v, str))
                elif key == "const" and isinstance(value, str):
                    words.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for tool in contract.tools:
        walk(contract.advertised_input_schema(tool))
    return frozenset(words)


SCHEMA_WORDS = _schema_words()


def echo(message: str, arguments: Any) -> str | None:
    """An argument value of the call that the message repeats as a token of its own, or None.

    Only values a constant text could not hold by chance count: at least ECHO_MIN_CHARS long, not a
    plain word (an id, key, cursor or marker holds a digit or a sign), not an enum value of the schemas."""
    for value in _strings(arguments):
        if len(value) < ECHO_MIN_CHARS or value.isalpha() or value in SCHEMA_WORDS:
            continue
        if re.search(r"(?<![\w])" + re.escape(value) + r"(?![\w])", message):
            return value
    return None
