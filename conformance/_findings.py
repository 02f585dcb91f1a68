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
BROKEN_REQUIREMENTS = "broken_requirements"  # evidence: the requirements the contract model says a call broke
# evidence, True: the model's requirements are the whole blame. Otherwise a check's own requirements are blamed
# beside them: the model names the rule an answer broke in general terms, the check knows what its probe was for.
MODEL_BLAME_ALONE = "model_blame_alone"
BROKEN_TOOLS = "broken_tools"  # evidence: the tools those failing cases called (optional)
COUNTEREXAMPLE_FILE = "counterexample"  # evidence: the counterexample a failed exploration wrote (conformance replay)
FAILING = (Status.FAIL, Status.WARN, Status.XFAIL)  # a check that reports something the target did wrong
UNDERLYING = (Status.FAIL, Status.WARN)  # what a PIN result's own assertions may have concluded
# The CLI serves the bundled reference from a scratch directory of this name; a report then says `--target reference`.
_REFERENCE_SCRATCH = "engram-conformance-"
_REFERENCE_MODULE = "engram_mcp.reference"


@cache
def catalog() -> dict[str, dict[str, Any]]:
    return {entry["id"]: entry for entry in load().requirements["requirements"]}


def failing_status(result: Result) -> Status | None:
    """The failing status a result's own assertions concluded, if they failed (a PIN result's too)."""
    if result.status in FAILING:
        return result.status
    if result.status is Status.PIN and result.underlying in UNDERLYING:
        return result.underlying
    return None


def _asserted(result: Result) -> tuple[str, ...]:
    """The requirements a failing result's own assertions break: those the contract model named and the check's
    own (or the model's alone, where the check says its requirements are a menu of which the model picks); else
    those whose catalog rules the failing cases broke, or every requirement the check covers."""
    judged = tuple(rid for rid in result.requirements if rid not in result.pins)
    named = tuple(rid for rid in dict.fromkeys(result.evidence.get(BROKEN_REQUIREMENTS) or ())
                  if rid not in result.pins)
    if named and result.evidence.get(MODEL_BLAME_ALONE):
        return named
    if named:
        return tuple(dict.fromkeys([*named, *_narrowed(result, judged)]))
    return _narrowed(result, judged)


def _narrowed(result: Result, judged: tuple[str, ...]) -> tuple[str, ...]:
    """A check's requirements, narrowed to those whose catalog rules its failing cases broke, if they say."""
    broken = set(result.evidence.get(BROKEN_RULES) or ())
    tools = set(result.evidence.get(BROKEN_TOOLS) or ())
    if broken:
        narrowed = tuple(rid for rid in judged if broken & set(catalog()[rid].get("rules") or ())
                         and (not tools or _reaches(catalog()[rid], tools)))
        judged = narrowed or judged
    return judged


def blamed(result: Result) -> tuple[str, ...]:
    """The requirements a result breaks: its failing assertions' (see _asserted) and its failed pins
    (``Result.pins``, judged by their own messages). Empty when it reports nothing wrong."""
    pinned = tuple(rid for rid, messages in result.pins.items() if messages)
    judged = _asserted(result) if failing_status(result) is not None else ()
    if result.status in (Status.SKIP, Status.NA, Status.BLOCKED, Status.ERROR):
        return ()
    return tuple(dict.fromkeys([*judged, *pinned]))


def requirement_outcomes(result: Result) -> dict[str, tuple[Status, str]]:
    """What one result concluded about each requirement it touches: the pins by their own messages, the
    requirements its failing assertions break by its failing status, the others by what it concluded."""
    out: dict[str, tuple[Status, str]] = {}
    failing = failing_status(result)
    asserted = set(_asserted(result)) if failing is not None else set()
    xfail = result.status is Status.XFAIL
    for rid in dict.fromkeys([*result.requirements, *asserted]):
        if rid in result.pins:
            continue
        if failing is None:
            status = Status.PASS if result.status is Status.PIN else result.status
            out[rid] = (status, "" if status is Status.PASS else result.message)
        elif rid in asserted:
            out[rid] = (Status.XFAIL if xfail else failing, result.message)
        else:
            out[rid] = (Status.PASS, "the check's failing calls broke other requirements")
    for rid, messages in result.pins.items():
        status = (Status.XFAIL if xfail else Status.FAIL) if messages else Status.PASS
        out[rid] = (status, "; ".join(messages))
    return out


def leveled(result: Result, scored: frozenset[str]) -> Status:
    """The status a result shows at a level scoring these sources: PIN where every requirement it breaks is one
    the level does not score (a pin, at the contract level); FAIL (or WARN, for SHOULDs alone) where a
    passing check's pins failed at a level that scores them."""
    if result.status not in (Status.PASS, Status.FAIL, Status.WARN):
        return result.status
    broken = blamed(result)
    if not broken:
        return result.status
    if all(catalog()[rid]["source"] not in scored for rid in broken if rid in catalog()):
        return Status.PIN
    if result.status is Status.PASS:
        levels = {catalog()[rid]["level"] for rid in broken if rid in catalog()}
        return Status.WARN if levels <= {"SHOULD", "SHOULD NOT", "MAY"} else Status.FAIL
    return result.status


def _reaches(entry: dict[str, Any], tools: set[str]) -> bool:
    named = set(entry.get("tools") or ())
    return "*" in named or bool(named & tools)


def spared(result: Result) -> tuple[str, ...]:
    """The requirements a failing result covers but does not break (its failing calls broke others)."""
    return tuple(rid for rid, (status, _) in requirement_outcomes(result).items()
                 if failing_status(result) is not None and status is Status.PASS and rid not in result.pins)


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
    """One command that runs this check again against the same target, with what decides its cases; for a failed
    exploration, the replay of the counterexample it wrote."""
    target, generated_profile = _target_argument(run)
    command = ["conformance", "--target", target]
    profile_path = getattr(run.profile, "path", None)
    if profile_path is not None and not generated_profile:
        command += ["--profile", str(profile_path)]
    counterexample = result.evidence.get(COUNTEREXAMPLE_FILE)
    if isinstance(counterexample, str):
        return shlex.join(["conformance", "replay", counterexample, *command[1:]])
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
