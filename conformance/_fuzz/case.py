"""A case: one tools/call's arguments and the shared oracle's verdict on them."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engram_mcp.conformance import _pins
from engram_mcp.contract import ArgumentOracle


@functools.cache
def oracle() -> ArgumentOracle:
    """One oracle for every case (it compiles the schemas once)."""
    return ArgumentOracle()


def utc_now() -> datetime:
    return datetime.now(UTC)


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
    pins: tuple[str, ...] = ()  # pins the refusal rests on alone (see _pins): not required at contract level

    @functools.cached_property
    def unsendable(self) -> str | None:  # asked several times per case; its arguments never change
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
    """The pins the case's verdict rests on: where the contract allows other answers than the oracle's."""
    if unsendable(arguments) is not None:
        return ()
    return _pins.pins_of(tool, arguments)


LONE_SURROGATE = "a lone surrogate, which the SDK session cannot serialise"


def unsendable(arguments: Any) -> str | None:
    """Why these arguments cannot cross an MCP SDK session unchanged, or None.

    The SDK serialises requests with pydantic: raw bytes are no JSON at all, a
    lone surrogate cannot be encoded (and the failure closes the client's
    transport), and NaN or an infinity would silently become null.
    """
    if isinstance(arguments, bytes | bytearray):
        return "raw bytes, not JSON"
    try:  # the common case at C speed: JSON with no non-finite number that encodes as UTF-8
        json.dumps(arguments, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (ValueError, TypeError, RecursionError):  # UnicodeEncodeError is a ValueError: find which one below
        pass
    else:
        return None
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

