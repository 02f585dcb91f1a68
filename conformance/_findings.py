"""What a report says about one check result: the requirements it breaks, and how to reproduce it.

A family check (the generated argument cases, say) lists every requirement any of
its cases can exercise. When it fails, blaming all of them would mark requirements
failed that no failing case touched, so the check records the catalog rules its
failing cases broke (evidence key ``BROKEN_RULES``, with the tools they called in
``BROKEN_TOOLS``) and a requirement is blamed only when its own ``rules`` in the
catalog meet them, for one of those tools. A failure without that
evidence blames every requirement the check covers, as before.
"""

from __future__ import annotations

import shlex
from functools import cache
from typing import TYPE_CHECKING, Any

from engram_mcp.conformance._checks import Status
from engram_mcp.contract import load

if TYPE_CHECKING:
    from engram_mcp.conformance._run import Result, Run

BROKEN_RULES = "broken_rules"  # evidence: the catalog rule ids the failing cases of a check broke
BROKEN_TOOLS = "broken_tools"  # evidence: the tools those failing cases called (optional)
FAILING = (Status.FAIL, Status.WARN, Status.XFAIL)  # a check that reports something the target did wrong
# The CLI serves the bundled reference from a scratch directory of this name; a report then says `--target reference`.
_REFERENCE_SCRATCH = "engram-conformance-"
_REFERENCE_MODULE = "engram_mcp.reference"


@cache
def catalog() -> dict[str, dict[str, Any]]:
    return {entry["id"]: entry for entry in load().requirements["requirements"]}


def blamed(result: Result) -> tuple[str, ...]:
    """The requirements a failing result breaks (empty when the result reports no failure).

    Profile pins judged inside the check (``Result.pins``) are blamed by their own
    messages; the other requirements by the rules the failing cases broke."""
    if result.status not in FAILING:
        return ()
    pinned = tuple(rid for rid, messages in result.pins.items() if messages)
    judged = tuple(rid for rid in result.requirements if rid not in result.pins)
    broken = set(result.evidence.get(BROKEN_RULES) or ())
    tools = set(result.evidence.get(BROKEN_TOOLS) or ())
    if broken:
        narrowed = tuple(rid for rid in judged if broken & set(catalog()[rid].get("rules") or ())
                         and (not tools or _reaches(catalog()[rid], tools)))
        judged = narrowed or judged
    return tuple(dict.fromkeys([*judged, *pinned]))


def _reaches(entry: dict[str, Any], tools: set[str]) -> bool:
    named = set(entry.get("tools") or ())
    return "*" in named or bool(named & tools)


def spared(result: Result) -> tuple[str, ...]:
    """The requirements a failing result covers but does not break (its failing cases broke other rules)."""
    if result.status not in FAILING or not result.evidence.get(BROKEN_RULES):
        return ()
    hit = set(blamed(result))
    return tuple(rid for rid in result.requirements if rid not in hit and rid not in result.pins)


def is_bundled_reference(label: str) -> bool:
    """Whether a target is the bundled reference as `--target reference` serves it (from a scratch directory)."""
    return _REFERENCE_MODULE in label and _REFERENCE_SCRATCH in label


def _target_argument(run: Run) -> tuple[str, bool]:
    """The --target to give again, and whether the profile is the run's own generated one."""
    label = run.target.label
    if is_bundled_reference(label):
        return "reference", True
    return label, False


def reproduction(run: Run, result: Result) -> str:
    """One command that runs this check again against the same target, with what decides its cases."""
    target, generated_profile = _target_argument(run)
    command = ["conformance", "--target", target]
    profile_path = getattr(run.profile, "path", None)
    if profile_path is not None and not generated_profile:
        command += ["--profile", str(profile_path)]
    command += ["--select", result.check_id]
    if result.era:
        command += ["--era", result.era]
    command += ["--seed", str(run.seed), "--examples", str(run.examples)]
    if run.level != "contract":
        command += ["--level", run.level]
    if run.deep:
        command.append("--deep")
    if run.strict:
        command.append("--strict")
    return shlex.join(command)


def area(result: Result) -> str:
    """The contract area a check belongs to, for grouping in CI: the section of its first requirement and its family."""
    first = catalog().get(result.requirements[0]) if result.requirements else None
    section = first["section"] if first else "run"
    return f"{section} / {result.family}"
