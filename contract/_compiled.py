"""Compiled validators for the valid-input fast path.

jsonschema-rs judges a value against the same schema files, with the project's
x- keywords and its ``pattern`` meaning supplied as the very checks the Python
validator runs (contract/_vocabulary.py). It only ever answers "valid": any
other answer, or a value it cannot take (a lone surrogate, a number beyond 64
bits, a key that is not a string), leaves the value to the Python validator,
whose errors name the rules. tests/test_compiled_validators.py runs both over
the argument fixtures and generated inputs.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

import jsonschema_rs

from engram_mcp.contract._vocabulary import _INSTANT, ecma_regex, is_calendar_instant, utf8_length

if TYPE_CHECKING:
    from engram_mcp.contract._loader import Contract


class _Refused(Exception):
    """Raised by a keyword to tell jsonschema-rs the value fails it; the message is never read."""


class _Utf8Bytes:
    def __init__(self, parent_schema: Any, bounds: dict[str, int], schema_path: Any) -> None:
        self.minimum, self.maximum = bounds.get("minimum", 0), bounds.get("maximum")

    def validate(self, instance: Any) -> None:
        if not isinstance(instance, str):
            return
        size = utf8_length(instance)
        if size is not None and (size < self.minimum or (self.maximum is not None and size > self.maximum)):
            raise _Refused


class _Nfc:
    def __init__(self, parent_schema: Any, required: bool, schema_path: Any) -> None:
        self.required = required

    def validate(self, instance: Any) -> None:
        if (self.required and isinstance(instance, str) and utf8_length(instance) is not None
                and not unicodedata.is_normalized("NFC", instance)):
            raise _Refused


class _Calendar:
    def __init__(self, parent_schema: Any, required: bool, schema_path: Any) -> None:
        self.required = required

    def validate(self, instance: Any) -> None:
        shaped = self.required and isinstance(instance, str) and _INSTANT.match(instance)
        if shaped and not is_calendar_instant(instance):
            raise _Refused


class _Pattern:
    """The pattern with the ECMA-262 meaning the Python validator gives it (``ecma_regex``)."""

    def __init__(self, parent_schema: Any, pattern: str, schema_path: Any) -> None:
        self.regex = ecma_regex(pattern)

    def validate(self, instance: Any) -> None:
        if isinstance(instance, str) and not self.regex.search(instance):
            raise _Refused


_KEYWORDS: dict[str, Any] = {"pattern": _Pattern, "x-utf8Bytes": _Utf8Bytes, "x-nfc": _Nfc, "x-calendar": _Calendar}


def compiled_validity(contract: Contract, schema: dict[str, Any]) -> Callable[[Any], bool]:
    """True when jsonschema-rs finds ``value`` valid against ``schema``; False for every other answer."""
    validator = jsonschema_rs.Draft202012Validator(schema, registry=_registry(contract), keywords=_KEYWORDS)

    def valid(value: Any) -> bool:
        try:
            return bool(validator.is_valid(value))
        except Exception:  # a value it cannot take: the Python validator judges it
            return False

    return valid


@cache
def _registry(contract: Contract) -> jsonschema_rs.Registry:
    return jsonschema_rs.Registry([(document["$id"], document) for document in contract.schema_files.values()])
