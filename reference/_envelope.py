"""Result envelopes and their MCP form, built from the error table alone."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from engram_mcp.contract import load
from engram_mcp.reference._errors import ReferenceServerError


class Refusal(ReferenceServerError):
    """A contract error code, raised inside the core and turned into a failure envelope."""

    def __init__(self, code: str) -> None:
        if code not in load().errors:
            raise ValueError(f"not a contract error code: {code}")
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class Outcome:
    """What the core decided: a success value or an error code, never both."""

    value: dict[str, Any] | None = None
    code: str | None = None

    @property
    def ok(self) -> bool:
        return self.code is None


def envelope(outcome: Outcome, audit_id: str) -> dict[str, Any]:
    """The envelope of one call; ``audit_id`` is the host's, from the call's binding (EMC-HP-052)."""
    if outcome.code is None:  # outcome.ok, spelled so the code below is known to be a str
        return {
            "ok": True,
            "output": {"schema_version": 1, "value": outcome.value},
            "auditId": audit_id,
            "redactionClass": "high",
        }
    error = load().errors[outcome.code]
    return {
        "ok": False,
        "auditId": audit_id,
        "redactionClass": "high",
        "error": {"code": error.code, "message": error.message, "retriable": error.retriable},
    }


def tool_result(env: dict[str, Any]) -> types.CallToolResult:
    """structuredContent plus the identical JSON as text; isError is !ok."""
    text = json.dumps(env, ensure_ascii=False, separators=(",", ":"))
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=env,
        is_error=not env["ok"],
    )
