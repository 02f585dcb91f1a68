"""What a check needs to run: the tools it calls, the scope roles it uses, the eras it applies to.

A check declares them beside its requirement ids (``@check(id, *requirements, uses=…, cases=…, roles=…,
eras=…)``), so a run can say, before a check starts, that it cannot run and why: the target does not serve a
tool the check calls, or the profile has no principal granted it, or no scope in a role it uses. A check whose
needs are met runs, whatever else the target lacks; this is what lets a server that serves two of the six tools
be judged on those two. ``tools/sync_checks.py`` copies every declaration into ``spec/checks.json``, which the
command line reads without importing the suite.

- ``uses``: the Engram tools the check calls, its set-up included; ``CASE_TOOL`` stands for the tool a
  parametrised case names (its ``tool`` parameter); ``SERVED`` marks a check that judges whichever of the six
  the target serves (the envelope sample, the advertised schemas), so it needs no particular one.
- ``cases``: further tools some cases call, keyed by a value of one of the case's parameters (its id).
- ``roles``: scope roles beyond the check's own scope, named in ``ROLES``.
- ``eras``: the protocol eras the check applies to; in any other era it is not applicable.
- ``unbound``: the check is judged without a host identity too (a call with no binding needs none): no profile
  holds it back, whatever the profile grants, so that a profile never hides a failure a run without one shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engram_mcp.contract import load

TOOLS = tuple(load().tools)
SHORT = {tool: tool.removeprefix("engram_memory_") for tool in TOOLS}
CASE_TOOL = "{tool}"  # in ``uses``: the tool named by the case's ``tool`` parameter
SERVED = "served"  # in ``uses``: the check judges whichever of the six tools the target serves
ERAS = ("legacy", "modern")

# Scope roles a check may use beyond its own scope, in words a newcomer understands. The finders are the
# profile's (``_profile.Profile.role``); this table is what a reason says is missing.
ROLES: Mapping[str, str] = {
    "second-workspace": "another workspace of the same tenant with memory on and a principal",
    "second-tenant": "a second tenant with memory on and a principal",
    "memory-off": "a scope the host has not opted in (memory = false)",
    "gated-capture": "a memory-on scope whose capture needs a human confirmation (confirm_capture = true) and a "
                     "principal granted capture there",
    "gated-admission": "a memory-on scope whose admission needs a human confirmation (confirm_admission = true) and "
                       "a principal granted capture and request_admission there",
    "adjudicating": "a memory-on scope whose admission policy adjudicates (admission_policy = \"adjudicate\"), "
                    "ungated, with a principal granted capture and request_admission",
    "secret-rejecting": "a memory-on scope whose admission policy rejects secrets (admission_policy \"reject\" or "
                        "\"secret-scan\"), ungated, with a principal granted capture, request_admission, get and "
                        "search",
    "capture-denied": "a principal granted capture without the authority to capture (capture_denied_principals)",
    "limited-principal": "a principal granted some of the six tools but not all of them",
    "second-principal": "a second principal granted the same tools in the check's scope",
}


def tool_name(value: Any) -> str | None:
    """The full tool name a case parameter names (``capture`` or ``engram_memory_capture``), or None."""
    if not isinstance(value, str):
        return None
    if value in SHORT:
        return value
    full = "engram_memory_" + value
    return full if full in SHORT else None


def short(tools: Any) -> str:
    """Tool names without their common prefix, joined for a sentence: "capture, request_admission and get"."""
    names = [SHORT.get(tool, str(tool)) for tool in tools]
    if len(names) < 2:
        return names[0] if names else "no tool"
    return ", ".join(names[:-1]) + " and " + names[-1]


@dataclass(frozen=True)
class Needs:
    """A check's declared needs (see the module's docstring)."""

    uses: tuple[str, ...] = ()
    cases: tuple[tuple[str, tuple[str, ...]], ...] = ()
    roles: tuple[str, ...] = ()
    eras: tuple[str, ...] = ERAS
    unbound: bool = False

    def __post_init__(self) -> None:
        known = {*TOOLS, CASE_TOOL, SERVED}
        wrong = [t for t in (*self.uses, *(t for _, more in self.cases for t in more)) if t not in known]
        wrong += [r for r in self.roles if r not in ROLES] + [e for e in self.eras if e not in ERAS]
        if wrong:
            raise ValueError(f"unknown tools, roles or eras in a check's needs: {', '.join(wrong)}")

    @classmethod
    def declared(cls, uses: Any = (), cases: Mapping[str, Any] | None = None, roles: Any = (),
                 eras: Any = ERAS, unbound: bool = False) -> Needs:
        """From the decorator's keywords: a name or a sequence of names each."""
        def names(value: Any) -> tuple[str, ...]:
            return (value,) if isinstance(value, str) else tuple(value)

        return cls(names(uses), tuple((key, names(more)) for key, more in (cases or {}).items()), names(roles),
                   names(eras), unbound)

    @property
    def judges_served(self) -> bool:
        return SERVED in self.uses

    def tools(self, params: Mapping[str, Any] | None = None) -> frozenset[str]:
        """The tools one case calls: its fixed ones, the tool it names, and those its parameters add."""
        params = params or {}
        found = {tool for tool in self.uses if tool in SHORT}
        if CASE_TOOL in self.uses:
            named = tool_name(params.get("tool"))
            if named is not None:
                found.add(named)
        values = {str(value) for name, value in params.items() if name != "era"}
        for key, more in self.cases:
            if key in values:
                found.update(more)
        return frozenset(found)

    def every_tool(self, case_tools: Any = TOOLS) -> frozenset[str]:
        """Every tool some case may call (``case_tools``: those the ``tool`` parameter can name)."""
        found = {tool for tool in self.uses if tool in SHORT} | {t for _, more in self.cases for t in more}
        if CASE_TOOL in self.uses:
            found.update(case_tools)
        return frozenset(found)

    def as_data(self) -> dict[str, Any]:
        """The declaration as spec/checks.json holds it."""
        return {"uses": list(self.uses), "cases": {key: list(more) for key, more in self.cases},
                "roles": list(self.roles), "eras": list(self.eras), "unbound": self.unbound}


def _named(suffix: str) -> str:
    return next(tool for tool in TOOLS if tool == "engram_memory_" + suffix)


# The six tools by name, from the contract's table, for the checks' declarations.
SEARCH, GET, CAPTURE = _named("search"), _named("get"), _named("capture")
ADMIT, WITHDRAW, FORGET = _named("request_admission"), _named("withdraw"), _named("forget")
