"""This project's profile as a refinement of the contract model: its pins narrow the allowed sets, nothing more.

A pin applies to an answer the contract allows; an answer the contract refuses is the model's to report.
So a pin can never fail a contract requirement: it can only say that an answer the contract allows is not
the one this profile chose. Most pins are data (spec/refinement.json: situations, the answers kept or
dropped, the requirement); the argument pins follow the oracle, which holds this project's schemas.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache

from engram_mcp.contract._loader import load
from engram_mcp.contract.model._arguments import ACCEPTED, judge_arguments
from engram_mcp.contract.model._call import Call
from engram_mcp.contract.model._expect import Judgement, Problem

ORDER_PIN = "EMC-HP-022"  # arguments are judged before the purpose
# A key whose earlier use was refused: the profile reserves nothing for a refusal (EMC-HP-071), so the pins of the
# call's own situation apply too; so they do after a retriable refusal, which leaves the key free.
FREE_KEY_SUFFIXES = ("+key-after-refusal", "+after-retriable")


@dataclass(frozen=True)
class Pin:
    situations: tuple[str, ...]
    keep: tuple[str, ...]
    drop: tuple[str, ...]
    requirement: str
    why: str

    def applies(self, situation: str) -> bool:
        plain = situation
        for suffix in FREE_KEY_SUFFIXES:
            plain = plain.replace(suffix, "")
        return any(fnmatchcase(name, pattern) for pattern in self.situations for name in (situation, plain))

    def holds(self, outcome: str, matched: tuple[str, ...]) -> bool:
        """keep: the answer (its outcome word or an alternative it fits) is one the pin keeps; drop: the answer
        fits an alternative the pin does not drop."""
        if self.keep:
            return any(fnmatchcase(answer, pattern) for answer in (outcome, *matched) for pattern in self.keep)
        return any(not any(fnmatchcase(name, pattern) for pattern in self.drop) for name in matched)


@cache
def pins() -> tuple[Pin, ...]:
    catalog = {r["id"]: r for r in load().requirements["requirements"]}
    out = []
    for entry in load().refinement["refinements"]:
        requirement = entry["requirement"]
        if catalog.get(requirement, {}).get("source") != "pin":
            raise ValueError(f"spec/refinement.json pins {requirement}, which is no profile requirement")
        out.append(Pin(tuple(entry["situations"]), tuple(entry.get("keep", ())), tuple(entry.get("drop", ())),
                       requirement, entry["why"]))
    return tuple(out)


def refine(call: Call, judgement: Judgement) -> tuple[Problem, ...]:
    """The pins an allowed, conclusive answer breaks (none for an answer the contract refuses)."""
    if not judgement.allowed or not judgement.conclusive:
        return ()
    seen, situation = judgement.seen, judgement.expectation.situation
    argued = _argument_pins(call, judgement)
    if _arguments_judged(judgement) and not judge_arguments(call.tool, call.arguments).valid:
        return argued  # arguments this profile refuses: that refusal is its answer
    problems = [Problem(pin.requirement, f"{judgement.expectation.describe}: this profile answers "
                                         f"{_described(pin)}; the target answered {seen.describe()}")
                for pin in pins() if pin.applies(situation) and not pin.holds(seen.outcome, judgement.matched)]
    return tuple(problems) + argued


def _described(pin: Pin) -> str:
    return " or ".join(pin.keep) if pin.keep else "anything but " + " or ".join(pin.drop)


def _arguments_judged(judgement: Judgement) -> bool:
    """Whether the call got as far as its arguments (not refused for its binding, tool or scope first)."""
    return judgement.expectation.judged and not judgement.expectation.situation.startswith(
        ("binding.", "tool.", "scope."))


def _argument_pins(call: Call, judgement: Judgement) -> tuple[Problem, ...]:
    if not _arguments_judged(judgement):
        return ()
    verdict = judge_arguments(call.tool, call.arguments)
    seen = judgement.seen
    code = verdict.code or "an error code"  # set whenever the verdict refuses, which is when it is said
    out: list[Problem] = []
    if verdict.pins:
        if verdict.valid and judgement.matched == ("argument-refusal",):
            out += [Problem(pin, f"arguments this profile accepts were refused {seen.outcome}") for pin in verdict.pins]
        elif not verdict.valid and seen.outcome != verdict.code:
            out += [Problem(pin, f"arguments this profile refuses with {code} were answered "
                                 f"{seen.describe()}") for pin in verdict.pins]
    if ACCEPTED not in verdict.allowed and not call.purpose_ok and seen.kind == "protocol":
        out.append(Problem(ORDER_PIN, f"arguments refused {code} by this profile were judged after the "
                                      "purpose (-32603)"))
    return tuple(out)
