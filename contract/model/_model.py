"""The model of contract 1.0.0: for a state and a call, the allowed answers; for an answer, the next state.

A call's situation is decided in the contract's terms, outermost first:

- §0 protocol errors: an untrusted host context is -32603 (EMC-HOST-011); a tool the principal lacks is
  -32602 (EMC-DISC-003); a scope where memory is off or never configured, or a principal it never names, is
  refused with either (EMC-DISC-004, EMC-HOST-007: "-32603 … principal, tenant o fuente no coincidente" and
  "-32602 Unknown tool" both fit); a purpose other than the bound one is -32603 (EMC-HOST-008);
- the arguments (``_arguments``): an invalid call is refused with its code and changes nothing;
- a passed deadline: DEADLINE_EXCEEDED, and nothing runs (EMC-HOST-015);
- the call's own situation (``_lifecycle``, ``_reads``), as its idempotency key decides it (``_keys``);
- the confirmation gate (EMC-GATE-001/002/008): without an approval, nothing that would change memory may
  happen; an approval the server never asked for (and no host reference carried) is no confirmation.

Where two of these apply and the contract gives no order between them, either answer is allowed; the
profile fixes the order (EMC-HP-022), in ``_refine``.
"""

from __future__ import annotations

from dataclasses import replace

from engram_mcp.contract._loader import load
from engram_mcp.contract.model._arguments import ACCEPTED, judge_arguments
from engram_mcp.contract.model._call import Call, HostFacts, Observation
from engram_mcp.contract.model._expect import Alternative, Expectation, Judgement, Problem, cited, judge
from engram_mcp.contract.model._keys import lapse_effect, with_key
from engram_mcp.contract.model._lifecycle import BUILDERS
from engram_mcp.contract.model._reads import get, search
from engram_mcp.contract.model._state import State

_CONTRACT = load()
UNTRUSTED = _CONTRACT.protocol_errors["trusted_context_unavailable"].jsonrpc_code
UNKNOWN_TOOL = _CONTRACT.protocol_errors["unknown_tool"].jsonrpc_code
PURPOSED = frozenset({"engram_memory_search", "engram_memory_get", "engram_memory_capture"})
READS = {"engram_memory_search": search, "engram_memory_get": get}
ALWAYS_GATED = frozenset(t for t, tool in _CONTRACT.tools.items() if tool.confirmation == "always")


def _protocol(name: str, codes: set[int], *cites: str) -> Alternative:
    return Alternative(name, "protocol", frozenset(codes), cited(*cites))


class Model:
    """Contract 1.0.0 as a function of (state, call), given the host's own facts (``HostFacts``)."""

    def __init__(self, facts: HostFacts) -> None:
        self.facts = facts

    def expect(self, state: State, call: Call) -> Expectation:
        early = self._protocol_refusal(call)
        if early is not None:
            return early
        verdict = judge_arguments(call.tool, call.arguments)
        refusals: list[Alternative] = []
        if verdict.allowed - {ACCEPTED}:
            refusals.append(Alternative("argument-refusal", "refusal", frozenset(verdict.allowed - {ACCEPTED}),
                                        cited("EMC-ENC-008")))
        if call.tool in PURPOSED and not call.purpose_ok:
            purpose = _protocol("purpose", {UNTRUSTED}, "EMC-HOST-008")
            if call.tool in BUILDERS and ACCEPTED in verdict.allowed:  # its key is well formed: keep it free
                purpose = replace(purpose, effect=lapse_effect(call, "purpose"))
            refusals.append(purpose)
        if ACCEPTED not in verdict.allowed or not call.purpose_ok:
            return self._gated(call, Expectation("arguments.refused", _refused_words(call, verdict.allowed),
                                                 tuple(refusals), tuple(dict.fromkeys(
                                                     r for a in refusals for r in a.cites))))
        own = self._situation(state, call)
        if refusals:  # a pinned refusal of arguments the contract accepts is allowed beside the situation's answers
            own = replace(own, alternatives=(*own.alternatives, *refusals))
        if call.deadline_passed:
            own = _past_deadline(own)
        elif call.deadline_passed is None:  # the server's clock may say either
            own = replace(own, alternatives=(*own.alternatives, _LATE))
        gated = self._gated(call, own)
        if call.binding is None:  # a binding only the profile refuses: the protocol refusal is allowed as well
            gated = replace(gated, alternatives=(*gated.alternatives,
                                                 _protocol("untrusted", {UNTRUSTED}, "EMC-HOST-011")))
        return gated

    def judge(self, state: State, call: Call, seen: Observation) -> tuple[Judgement, State]:
        if seen.kind == "question":  # a confirmation asked for: no effect until the call comes back answered
            expectation = self.expect(state, call)
            return Judgement(expectation, seen, True, False), state
        return judge(self.expect(state, call), state, seen)

    # -- the layers ------------------------------------------------------------------------------------------------

    def _protocol_refusal(self, call: Call) -> Expectation | None:
        if call.binding is False:
            return Expectation("binding.untrusted", "a call without a binding the host trusts",
                               (_protocol("untrusted", {UNTRUSTED}, "EMC-HOST-011"),), cited("EMC-HOST-011"))
        if call.tool not in _CONTRACT.tools:
            return Expectation("tool.unknown", "a call of a tool the contract does not define",
                               (_protocol("unknown-tool", {UNKNOWN_TOOL}, "EMC-DISC-003"),), cited("EMC-DISC-003"))
        facts = self.facts.of(call.scope)
        if facts is None or not facts.memory or call.principal not in facts.grants:
            why = ("a scope the host never configured" if facts is None else "a scope where memory is off"
                   if not facts.memory else "a principal the scope's configuration never names")
            return Expectation("scope.unconfigured", f"a call in {why}",
                               (_protocol("no-memory", {UNKNOWN_TOOL, UNTRUSTED}, "EMC-DISC-004", "EMC-HOST-007"),),
                               cited("EMC-DISC-004", "EMC-HOST-007"))
        if call.tool not in facts.grants[call.principal]:
            return Expectation("tool.ungranted", "a call of a tool the principal is not granted",
                               (_protocol("unknown-tool", {UNKNOWN_TOOL}, "EMC-DISC-003"),), cited("EMC-DISC-003"))
        return None

    def _situation(self, state: State, call: Call) -> Expectation:
        if call.tool in READS:
            return READS[call.tool](state, self.facts, call)
        fresh = BUILDERS[call.tool](state, self.facts, call)
        return with_key(call, state, fresh)

    def _gated(self, call: Call, own: Expectation) -> Expectation:
        facts = self.facts.of(call.scope)
        gated = call.tool in ALWAYS_GATED or (facts is not None and call.tool in facts.gated)
        if not gated:
            return own
        requirement = "EMC-GATE-001" if call.tool in ALWAYS_GATED else "EMC-GATE-002"
        if call.confirmation == "approved":
            if call.reference:
                return own
            return replace(own, alternatives=tuple(_asked_first(a, requirement) if a.mutates else a
                                                   for a in own.alternatives))
        failed = Alternative("gate_failed", "refusal", frozenset({"gate_failed"}), cited(requirement))
        missing = _protocol("no-confirmation", {UNTRUSTED}, "EMC-GATE-008")
        if call.confirmation == "unknown":
            return replace(own, alternatives=(*own.alternatives, failed, missing))
        kept = tuple(a for a in own.alternatives if not a.mutates)
        extra = failed if call.confirmation == "declined" else missing
        suffix = "+declined" if call.confirmation == "declined" else "+absent"
        words = (", its confirmation declined" if call.confirmation == "declined"
                 else ", with no way to confirm it")
        return replace(own, situation=own.situation + suffix, describe=own.describe + words,
                       alternatives=(extra, *kept), cites=tuple(dict.fromkeys([*own.cites, *extra.cites])))


def _asked_first(alternative: Alternative, requirement: str) -> Alternative:
    """A first execution of a gated call counts only when the host was asked (or carried its approval)."""
    inner = alternative.check

    def check(seen: Observation) -> list[Problem]:
        problems = inner(seen) if inner else []
        if not seen.asked:
            problems = [*problems, Problem(requirement, "the call ran without asking for the confirmation it "
                                                        "needs, and carried none")]
        return problems

    return replace(alternative, check=check)


_LATE = Alternative("DEADLINE_EXCEEDED", "refusal", frozenset({"DEADLINE_EXCEEDED"}), cited("EMC-HOST-015"))


def _past_deadline(own: Expectation) -> Expectation:
    kept = tuple(a for a in own.alternatives if a.kind != "success")
    return replace(own, situation=own.situation + "+deadline", describe=own.describe + ", its deadline passed",
                   alternatives=(_LATE, *kept), cites=cited("EMC-HOST-015"),
                   transient=own.transient - {"DEADLINE_EXCEEDED"})


def _refused_words(call: Call, allowed: frozenset[str | None]) -> str:
    codes = sorted(c for c in allowed if c is not None)
    return (f"a {call.tool.removeprefix('engram_memory_')} call whose arguments the contract refuses "
            f"({', '.join(codes)})" if codes else
            f"a {call.tool.removeprefix('engram_memory_')} call whose purpose_ref is not the bound one")
