"""The project's x- keywords, added to a Draft 2020-12 validator.

Each keyword expresses a bound JSON Schema cannot: byte lengths, Unicode
normalisation, calendar validity. Errors come back as ordinary
``jsonschema.ValidationError`` values, path and all.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator, ValidationError, validators

_INSTANT = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.[0-9]{3}Z\Z")
_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def utf8_length(text: str) -> int | None:
    """UTF-8 length, or None for text holding a lone surrogate."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def is_calendar_instant(text: str) -> bool:
    """True when an instant-shaped string names a real UTC time (year 0000 included)."""
    match = _INSTANT.match(text)
    if match is None:
        return False
    year, month, day, hour, minute, second = map(int, match.groups())
    if not 1 <= month <= 12:
        return False
    days = 29 if month == 2 and is_leap(year) else _DAYS[month - 1]
    return 1 <= day <= days and hour <= 23 and minute <= 59 and second <= 59


def _utf8_bytes(validator: Any, bounds: dict[str, int], instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not isinstance(instance, str):
        return
    size = utf8_length(instance)
    if size is None:
        return  # reported by the unicode_scalars rule
    if size < bounds.get("minimum", 0):
        yield ValidationError(f"is shorter than {bounds['minimum']} UTF-8 bytes")
    if "maximum" in bounds and size > bounds["maximum"]:
        yield ValidationError(f"is longer than {bounds['maximum']} UTF-8 bytes")


def _nfc(validator: Any, required: bool, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if (required and isinstance(instance, str) and utf8_length(instance) is not None
            and not unicodedata.is_normalized("NFC", instance)):
        yield ValidationError("is not in Unicode Normalization Form C")


def _calendar(validator: Any, required: bool, instance: Any, schema: Any) -> Iterator[ValidationError]:
    # Shape is the pattern's job; only judge strings that already have it.
    if required and isinstance(instance, str) and _INSTANT.match(instance) and not is_calendar_instant(instance):
        yield ValidationError("does not name a real UTC time")


@functools.cache
def ecma_regex(pattern: str) -> re.Pattern[str]:
    """Compile a schema pattern with ECMA-262 meaning for ``$`` and ``\\d``.

    Python's ``$`` also matches before a final newline and its ``\\d`` matches
    any Unicode digit; ECMA-262, which JSON Schema follows, does neither. So
    ``"sha256:…\\n"`` would pass a plain Python validator and fail every other.
    """
    out, i, in_class = [], 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            out.append("0-9" if nxt == "d" and in_class else "[0-9]" if nxt == "d" else ch + nxt)
            i += 2
            continue
        if ch == "[" and not in_class:
            in_class = True
        elif ch == "]" and in_class:
            in_class = False
        elif ch == "$" and not in_class:
            ch = r"\Z"
        out.append(ch)
        i += 1
    return re.compile("".join(out))


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if isinstance(instance, str) and not ecma_regex(pattern).search(instance):
        yield ValidationError("does not match the required pattern")


ContractValidator = validators.extend(
    Draft202012Validator,
    {"pattern": _pattern, "x-utf8Bytes": _utf8_bytes, "x-nfc": _nfc, "x-calendar": _calendar},
)
