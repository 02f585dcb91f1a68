"""Argument cases whose refusal rests on a pin alone (see engram_mcp.contract.model._arguments).

The bundled schemas and rules hold choices the contract leaves open (an opaque candidate_id's form, a
capability_policy's members, a page_cursor's length, which code a malformed digest gets, the order of family
refs, how the argument size is measured). For such a case the contract allows more answers than the
oracle's; ``allowed`` names them, ``ACCEPTED`` standing for "judged as valid arguments". At the contract level
any of them passes; ``--level pins`` scores the oracle's own answer through ``_checks.pin``.
"""

from __future__ import annotations

from typing import Any

from engram_mcp.contract.model import ACCEPTED, judge_arguments, relaxed

__all__ = ["ACCEPTED", "allowed", "pins_of", "relaxed"]


def pins_of(tool: str, arguments: Any) -> tuple[str, ...]:
    """The pins a case's verdict rests on (empty for a verdict the contract itself gives)."""
    return judge_arguments(tool, arguments).pins


def allowed(tool: str, arguments: Any) -> frozenset[str | None]:
    """The answers the contract allows: error codes, and ACCEPTED when the arguments are valid at its level."""
    return judge_arguments(tool, arguments).allowed
