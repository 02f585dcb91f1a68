"""The result envelope: one exact shape, a faithful text copy, the error table's codes, constant sanitised texts,
no echo.

Most checks judge one sample of calls per era, made in the check's scope by a
principal granted every tool: a success and several refusals of each tool
(INVALID_SCHEMA, INVALID_DIGEST, NOT_FOUND, DIGEST_CONFLICT, STALE_PAGE, the
lifecycle refusals). The sample is made once per era and shared by the checks.
Its mutations touch only what the sample itself created: a candidate it
withdraws and a record it forgets.

The checks on error codes and messages judge more than the sample: every
tools/call any check of the run made in the era (each session records its
calls), so the codes only other checks provoke — UNAUTHORIZED, RANKING_UNAVAILABLE,
PROJECTION_OVERSIZED and the rest — are judged too. They run after every other
check (the suite's conftest orders them last).

envelope.no-reflection plants a marker in every string of the arguments of
every tool (and in unknown members, host-owned members, oversized and non-NFC
values, a foreign purpose) and looks for it in everything that comes back.
Only search and get may carry it, and only inside a returned record's own
content, which is the caller's material by design.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from engram_mcp.conformance import _fuzz as fuzz
from engram_mcp.conformance import _messages as messages
from engram_mcp.conformance._checks import Blocked, check, pin, require
from engram_mcp.conformance._connect import Reply
from engram_mcp.conformance._envelope_reading import hits, record_content, reflections, same_json, text_copy
from engram_mcp.conformance._needs import ADMIT, CAPTURE, CASE_TOOL, FORGET, GET, SEARCH, SERVED, WITHDRAW
from engram_mcp.conformance._words import spoken
from engram_mcp.conformance._world import DIGEST, World, capture_arguments, fresh_key, unique
from engram_mcp.conformance.hosts import Answer
from engram_mcp.contract import load

CONTRACT = load()
ERRORS = CONTRACT.errors
TABLE_TEXT = "EMC-ENV-008"  # profile: each message is spec/errors.json's text for its code
TOOLS = fuzz.TOOLS
TOOL_IDS = [t.removeprefix("engram_memory_") for t in TOOLS]
AUDIT_MIN, AUDIT_MAX = CONTRACT.limit("audit_id.min_chars"), CONTRACT.limit("audit_id.max_chars")
AUDIT_PIN = "EMC-HP-052"  # the host's auditId, echoed (its length bound among it)
SUCCESS_KEYS = frozenset({"ok", "output", "auditId", "redactionClass"})
FAILURE_KEYS = frozenset({"ok", "auditId", "redactionClass", "error"})
ERROR_KEYS = frozenset({"code", "message", "retriable"})
OUTPUT_KEYS = frozenset({"schema_version", "value"})
EXACT_MEMBERS = "EMC-ENV-009"  # profile: no member beyond the contract's
CLOSED_VALUES = "EMC-ENV-007"  # profile: this project's closed value schemas
SHOWN = 50  # failing calls spelled out in a message (the reports keep up to 60 lines of it)


@dataclass
class Observed:
    label: str
    tool: str
    arguments: Any
    reply: Reply


@dataclass
class RunState:
    samples: dict[str, list[Observed]] = field(default_factory=dict)
    audit_ids: dict[str, str] = field(default_factory=dict)  # auditId -> where it was seen first
    repeated: list[str] = field(default_factory=list)


_RUNS: dict[int, tuple[Any, RunState]] = {}


def run_state(harness: Any) -> RunState:
    held = _RUNS.get(id(harness))
    if held is None or held[0] is not harness:
        held = _RUNS[id(harness)] = (harness, RunState())
    return held[1]


def register(state: RunState, era: str, observed: Observed) -> None:
    """Remember every auditId seen in the run, and any that comes back a second time."""
    envelope = observed.reply.envelope
    audit_id = envelope.get("auditId") if isinstance(envelope, dict) else None
    if not isinstance(audit_id, str):
        return
    where = f"{era}: {observed.label}"
    if audit_id in state.audit_ids:
        state.repeated.append(f"{spoken(audit_id)} in {state.audit_ids[audit_id]} and again in {where}")
    else:
        state.audit_ids[audit_id] = where


# -- the sample ---------------------------------------------------------------------------------------



NOT_SENT = Reply("cancelled")  # a call of the sample the target cannot take: a tool it does not serve


def _collect(world: World) -> list[Observed]:
    """The sample, made of the tools the target serves (the check's tools): a server that serves two of the six
    is judged on the envelopes of those two."""
    tools = world.tools if world.tools is not None else frozenset(TOOLS)
    scope = world.scope
    principal = world.principal(scope, tools)
    purpose = world.profile.purpose_ref
    out: list[Observed] = []

    def call(label: str, tool: str, arguments: Any, answer: Answer = "decline") -> Reply:
        if tool not in tools:
            return NOT_SENT
        reply = world.call(tool, arguments, scope=scope, principal=principal, answer=answer)
        out.append(Observed(label, tool, arguments, reply))
        return reply

    token = unique("envelope")
    first = capture_arguments(purpose, text=f"Envelope sample {token}: the ledger stays in one database.")
    captured = call("capture", CAPTURE, first).value
    second = call("capture of a second candidate", CAPTURE, capture_arguments(purpose)).value
    call("capture with an unknown member", CAPTURE, {**capture_arguments(purpose), "note": "extra"})
    malformed = capture_arguments(purpose)
    malformed["evidence"]["evidence_digest"] = DIGEST.upper()
    call("capture with an uppercase digest", CAPTURE, malformed)
    call("capture reusing a key for other content", CAPTURE, capture_arguments(purpose, key=first["idempotency_key"]))

    record_id = None
    if captured and isinstance(captured.get("candidate_id"), str):
        candidate = captured["candidate_id"]
        admitted = call("request_admission", ADMIT, {"candidate_id": candidate, "idempotency_key": fresh_key()}).value
        outcome = admitted.get("outcome") if admitted else None
        record_id = outcome.get("record_id") if isinstance(outcome, dict) else None
        call("request_admission of a decided candidate under a new key", ADMIT,
             {"candidate_id": candidate, "idempotency_key": fresh_key()})
        call("withdraw of an admitted candidate", WITHDRAW,
             {"candidate_id": candidate, "idempotency_key": fresh_key(), "reason_ref": "reason:conformance"}, "accept")
    call("request_admission of an unknown candidate", ADMIT,
         {"candidate_id": fuzz.UNKNOWN_CANDIDATE, "idempotency_key": fresh_key()})
    call("request_admission with a malformed candidate id", ADMIT,
         {"candidate_id": "candidate_NOT_HEX", "idempotency_key": fresh_key()})

    call("search", SEARCH, {"query": token, "purpose_ref": purpose})
    call("search with limit 0", SEARCH, {"query": token, "purpose_ref": purpose, "limit": 0})
    call("search with a cursor the server never minted", SEARCH,
         {"query": token, "purpose_ref": purpose, "page_cursor": "conformance-cursor"})
    call("search asking for semantic ranking", SEARCH,
         {"query": token, "purpose_ref": purpose,
          "capability_policy": {"minimum_channels": "lexical_and_semantic", "network": "forbid"}})
    if isinstance(record_id, str):
        call("get", GET, {"record_id": record_id, "purpose_ref": purpose})
    call("get of an unknown record", GET, {"record_id": fuzz.UNKNOWN_RECORD, "purpose_ref": purpose})
    call("get with a malformed record id", GET, {"record_id": "MEM_UPPER", "purpose_ref": purpose})

    if second and isinstance(second.get("candidate_id"), str):
        call("withdraw", WITHDRAW, {"candidate_id": second["candidate_id"], "idempotency_key": fresh_key(),
                                    "reason_ref": "reason:conformance"}, "accept")
    call("withdraw of an unknown candidate", WITHDRAW,
         {"candidate_id": fuzz.UNKNOWN_CANDIDATE, "idempotency_key": fresh_key(), "reason_ref": "reason:conformance"},
         "accept")
    call("withdraw without a reason", WITHDRAW,
         {"candidate_id": fuzz.UNKNOWN_CANDIDATE, "idempotency_key": fresh_key()})
    if isinstance(record_id, str):
        call("forget", FORGET, {"record_id": record_id, "idempotency_key": fresh_key(),
                                "reason_ref": "reason:conformance"}, "accept")
        call("forget of a forgotten record", FORGET, {"record_id": record_id, "idempotency_key": fresh_key(),
                                                      "reason_ref": "reason:conformance"}, "accept")
    call("forget of an unknown record", FORGET,
         {"record_id": fuzz.UNKNOWN_RECORD, "idempotency_key": fresh_key(), "reason_ref": "reason:conformance"},
         "accept")
    call("forget given a candidate id", FORGET,
         {"record_id": fuzz.UNKNOWN_CANDIDATE, "idempotency_key": fresh_key(), "reason_ref": "reason:conformance"})
    return out


def sample(world: World, harness: Any) -> list[Observed]:
    """This era's sample, made on first use."""
    state = run_state(harness)
    if world.era not in state.samples:
        observed = _collect(world)
        state.samples[world.era] = observed
        for item in observed:
            register(state, world.era, item)
    return state.samples[world.era]


def results(world: World, harness: Any) -> list[Observed]:
    """The sample's tool results (protocol errors carry no envelope and are left out)."""
    observed = sample(world, harness)
    kept = [o for o in observed if o.reply.kind == "result"]
    world.evidence.add("calls", len(observed))
    other = {o.label: o.reply.kind if o.reply.kind != "error" else
             f"JSON-RPC {spoken((o.reply.error or {}).get('code'))}" for o in observed if o.reply.kind != "result"}
    if other:
        world.evidence.add("not_results", other)
    require(kept, "no call of the sample returned a tool result")
    return kept


def envelopes(world: World, harness: Any, ok: bool | None = None) -> list[tuple[Observed, Any]]:
    """(call, structuredContent) of the sample's results; with ``ok``, only the successes (True) or the
    refusals (False), told apart by ``ok`` or, where there is no envelope to say, by isError."""
    out = [(o, o.reply.envelope) for o in results(world, harness)]
    if ok is not None:
        out = [(o, e) for o, e in out if succeeded(o.reply) is ok]
    return out


def succeeded(reply: Reply) -> bool:
    envelope = reply.envelope
    if isinstance(envelope, dict) and isinstance(envelope.get("ok"), bool):
        return envelope["ok"]
    return (reply.result or {}).get("isError") is not True


def fail_with(problems: list[str], what: str) -> None:
    if problems:
        lines = [f"{len(problems)} {what}; first: {problems[0]}", *(f"- {p}" for p in problems[:SHOWN])]
        if len(problems) > SHOWN:
            lines.append(f"... and {len(problems) - SHOWN} more")
        raise AssertionError("\n".join(lines))


def _code(envelope: Any) -> Any:
    error = envelope.get("error") if isinstance(envelope, dict) else None
    return error.get("code") if isinstance(error, dict) else None


def _errors(world: World, harness: Any) -> list[tuple[Observed, dict[str, Any]]]:
    """The refusals that carry an error object to judge."""
    failures = [(o, e["error"]) for o, e in envelopes(world, harness, ok=False)
                if isinstance(e, dict) and isinstance(e.get("error"), dict)]
    require(failures, "no refusal of the sample carried an error object")
    return failures


# -- the checks ---------------------------------------------------------------------------------------


@check("envelope.structured-content", "EMC-ENV-001", uses=SERVED)
def test_every_result_is_an_envelope_with_an_identical_text_copy(world: World, harness: Any) -> None:
    """structuredContent is an object, and the first text content item parses to exactly it."""
    problems = []
    for observed in results(world, harness):
        result = observed.reply.result or {}
        structured = result.get("structuredContent")
        if not isinstance(structured, dict):
            problems.append(f"{observed.label}: structuredContent is {type(structured).__name__}, not an object")
            continue
        text, why = text_copy(result)
        if text is None:
            problems.append(f"{observed.label}: {why}")
            continue
        try:
            parsed = json.loads(text)
        except ValueError:
            problems.append(f"{observed.label}: the text copy is not JSON")
            continue
        if not same_json(parsed, structured):
            problems.append(f"{observed.label}: the text copy differs from structuredContent")
    world.evidence.add("results_checked", len(results(world, harness)))
    fail_with(problems, "results are not a faithful envelope")


@check("envelope.is-error", "EMC-ENV-005", uses=SERVED)
def test_is_error_is_the_negation_of_ok(world: World, harness: Any) -> None:
    """isError is a JSON boolean equal to !ok (absent counts as false); ok is a JSON boolean."""
    problems = []
    judged = [(o, e) for o, e in envelopes(world, harness) if isinstance(e, dict) and "ok" in e]
    # Results with no envelope at all are for envelope.structured-content and the shape checks to report.
    require(judged, "no result of the sample carried an envelope with ok")
    for observed, envelope in judged:
        ok = envelope.get("ok")
        result = observed.reply.result or {}
        is_error = result.get("isError", False)
        if not isinstance(ok, bool):
            problems.append(f"{observed.label}: ok is {spoken(ok)}, not a boolean")
        elif not isinstance(is_error, bool):
            problems.append(f"{observed.label}: isError is {spoken(is_error)}, not a boolean")
        elif is_error is ok:
            problems.append(f"{observed.label}: isError is {str(is_error).lower()} with ok {str(ok).lower()}")
    fail_with(problems, "results disagree on isError")


def members(label: str, got: Any, expected: frozenset[str], what: str) -> str | None:
    """The contract's members missing from an object (a failure), after pinning any beyond them (EMC-ENV-009)."""
    keys = set(got) if isinstance(got, dict) else set()
    pin(EXACT_MEMBERS, keys <= expected,
        f"{label}: {what} carries {spoken(sorted(keys - expected))} beyond the contract's")
    missing = expected - keys
    return f"{label}: {what} lacks {spoken(sorted(missing))}" if missing else None


@check("envelope.success-shape", "EMC-ENV-002", "EMC-ENV-009", uses=SERVED)
def test_a_success_envelope_has_exactly_its_members(world: World, harness: Any) -> None:
    """{ok: true, output: {schema_version: 1, value}, auditId, redactionClass: "high"}; nothing else, in this
    profile."""
    successes = envelopes(world, harness, ok=True)
    require(successes, "no call of the sample succeeded")
    world.evidence.add("successes", sorted({o.tool for o, _ in successes}))
    problems = []
    for observed, envelope in successes:
        if not isinstance(envelope, dict):
            problems.append(f"{observed.label}: no envelope in structuredContent")
            continue
        problems += [p for p in [members(observed.label, envelope, SUCCESS_KEYS, "the envelope")] if p]
        output = envelope.get("output")
        lacking = members(observed.label, output, OUTPUT_KEYS, "output") if isinstance(output, dict) else None
        if not isinstance(output, dict) or lacking:
            problems.append(lacking or f"{observed.label}: output is {fuzz.describe(output, 120)}")
        elif type(output["schema_version"]) is not int or output["schema_version"] != 1:
            problems.append(f"{observed.label}: output.schema_version is {spoken(output['schema_version'])}")
        elif not isinstance(output["value"], dict):
            problems.append(f"{observed.label}: output.value is not an object")
        if envelope.get("redactionClass") != "high":
            problems.append(f"{observed.label}: redactionClass is {spoken(envelope.get('redactionClass'))}")
        if not isinstance(envelope.get("auditId"), str):
            problems.append(f"{observed.label}: auditId is {spoken(envelope.get('auditId'))}")
    fail_with(problems, "success envelopes are not exactly the contract's")


@check("envelope.failure-shape", "EMC-ENV-003", "EMC-ENV-009", uses=SERVED)
def test_a_failure_envelope_has_exactly_its_members(world: World, harness: Any) -> None:
    """{ok: false, auditId, redactionClass: "high", error: {code, message, retriable}}; nothing else, in this
    profile."""
    failures = envelopes(world, harness, ok=False)
    require(failures, "no call of the sample was refused with an envelope")
    world.evidence.add("codes", sorted({str(_code(e)) for _, e in failures}))
    problems = []
    for observed, envelope in failures:
        if not isinstance(envelope, dict):
            problems.append(f"{observed.label}: no envelope in structuredContent")
            continue
        problems += [p for p in [members(observed.label, envelope, FAILURE_KEYS, "the envelope")] if p]
        error = envelope.get("error")
        lacking = members(observed.label, error, ERROR_KEYS, "error") if isinstance(error, dict) else None
        if not isinstance(error, dict) or lacking:
            problems.append(lacking or f"{observed.label}: error is {fuzz.describe(error, 160)}")
        elif not (isinstance(error["code"], str) and isinstance(error["message"], str)
                  and isinstance(error["retriable"], bool)):
            problems.append(f"{observed.label}: error members have the wrong types: {fuzz.describe(error, 160)}")
        if envelope.get("redactionClass") != "high":
            problems.append(f"{observed.label}: redactionClass is {spoken(envelope.get('redactionClass'))}")
        if not isinstance(envelope.get("auditId"), str):
            problems.append(f"{observed.label}: auditId is {spoken(envelope.get('auditId'))}")
    fail_with(problems, "failure envelopes are not exactly the contract's")


@check("envelope.value-schema", "EMC-ENV-004", uses=SERVED)
def test_every_success_value_satisfies_its_tools_value_schema(world: World, harness: Any) -> None:
    """output.value has the members the contract lists for its tool, with the values it fixes
    (schemas/contract/<tool>.value.json); this profile's closed schema (schemas/tools/<tool>.value.json) is
    judged apart, as EMC-ENV-007."""
    successes = [(o, e) for o, e in envelopes(world, harness, ok=True) if isinstance(e, dict) and e.get("ok") is True]
    require(successes, "no call of the sample succeeded with an envelope")
    problems = []
    for observed, envelope in successes:
        value = (envelope.get("output") or {}).get("value") if isinstance(envelope.get("output"), dict) else None
        first = _first_violation(CONTRACT.contract_value_schema(observed.tool), value)
        if first:
            problems.append(f"{observed.label}: {first}")
            continue
        closed = _first_violation(CONTRACT.value_schema(observed.tool), value)
        pin(CLOSED_VALUES, closed is None, f"{observed.label}: outside this project's value schema: {closed or ''}")
        if closed is None and not CONTRACT.output_validator(observed.tool).is_valid(envelope):
            pin(CLOSED_VALUES, False, f"{observed.label}: the envelope breaks the outputSchema bundled for "
                                      f"{observed.tool}")
    world.evidence.add("values_checked", len(successes))
    fail_with(problems, "success values lack what the contract lists for them")


def _first_violation(schema: dict[str, Any], value: Any) -> str | None:
    errors = sorted(CONTRACT.validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    where = "/" + "/".join(str(p) for p in errors[0].absolute_path)
    return f"{len(errors)} violation(s), first at {where}: {errors[0].message[:160]}"


def every_call(world: World, harness: Any) -> list[Observed]:
    """Every tools/call this era's sessions made during the run (this check runs last), the sample included."""
    sample(world, harness)
    sessions = [harness.connection(world.era), *(c for c in harness.extra if c.era == world.era)]
    raw = harness.raw_sessions.get(world.era)
    calls = [call for session in [*sessions, *([raw] if raw is not None else [])] for call in session.calls]
    return [Observed(f"call {n} of the run ({tool})", tool, None, reply) for n, (tool, reply) in enumerate(calls, 1)]


def refusals(world: World, harness: Any) -> list[tuple[Observed, dict[str, Any]]]:
    """The refusals among every call of the run, each with its error object."""
    observed = every_call(world, harness)
    failures = [(o, o.reply.envelope["error"]) for o in observed
                if o.reply.kind == "result" and isinstance(o.reply.envelope, dict)
                and o.reply.envelope.get("ok") is False and isinstance(o.reply.envelope.get("error"), dict)]
    world.evidence.add("calls_judged", len(observed))
    require(failures, "no call of the run was refused with an error object")
    tally: dict[str, int] = {}
    for observed_call, error in failures:
        name = f"{observed_call.tool.removeprefix('engram_memory_')}:{error.get('code')}"
        tally[name] = tally.get(name, 0) + 1
    world.evidence.add("codes", dict(sorted(tally.items())))
    world.evidence.add("retriable_codes_seen", sorted({str(e.get("code")) for _, e in failures
                                                       if ERRORS.get(e.get("code")) is not None
                                                       and ERRORS[e.get("code")].retriable}))
    return failures


@check("envelope.error-codes", "EMC-ERR-001", "EMC-ERR-002", uses=SERVED)
@pytest.mark.engram_run_last
def test_error_codes_come_from_the_table(world: World, harness: Any) -> None:
    """Every refusal of the whole run carries a code of spec/errors.json, with the table's retriable flag."""
    problems = []
    for observed, error in refusals(world, harness):
        code = error.get("code")
        entry = ERRORS.get(code) if isinstance(code, str) else None
        if entry is None:
            problems.append(f"{observed.label}: {spoken(code)} is not a code of the error table")
        elif error.get("retriable") is not entry.retriable:
            problems.append(f"{observed.label}: {spoken(code)} with retriable {spoken(error.get('retriable'))}, "
                            f"the table says {spoken(entry.retriable)}")
    fail_with(problems, "refusals use codes outside the table or the wrong retriable flag")


@check("envelope.error-tools", "EMC-ERR-003", uses=SERVED)
@pytest.mark.engram_run_last
def test_each_tool_sends_only_its_codes(world: World, harness: Any) -> None:
    """Every refusal of the whole run carries a code spec/errors.json lists for the tool that sent it."""
    problems = []
    for observed, error in refusals(world, harness):
        code = error.get("code")
        entry = ERRORS.get(code) if isinstance(code, str) else None
        if entry is not None and observed.tool in CONTRACT.tools and observed.tool not in entry.tools:
            problems.append(f"{observed.label}: {entry.code} is not a code {observed.tool} may send")
    fail_with(problems, "refusals use codes their tool may not send")


def table_text(label: str, error: dict[str, Any]) -> None:
    """The pin on a message: this project's text for the code (judged apart, at --level pins)."""
    code = error.get("code")
    entry = ERRORS.get(code) if isinstance(code, str) else None
    if entry is not None:
        pin(TABLE_TEXT, error.get("message") == entry.message,
            f"{label}: {entry.code} came with {fuzz.describe(error.get('message'), 120)}, not the table's text")


@check("envelope.fixed-messages", "EMC-ENV-006", uses=SERVED)
@pytest.mark.engram_run_last
def test_each_code_comes_with_one_sanitised_message(world: World, harness: Any) -> None:
    """error.message is one text per code over every refusal of the run, and never holds the call's own values,
    a path, a stack trace or exception text. The wording is the target's own."""
    problems = []
    texts: dict[str, dict[str, str]] = {}  # code -> message -> the first call that sent it
    for observed, error in refusals(world, harness):
        code, message = error.get("code"), error.get("message")
        if not isinstance(code, str) or not isinstance(message, str):
            continue  # envelope.failure-shape reports these
        texts.setdefault(code, {}).setdefault(message, observed.label)
        found = messages.leak(message)
        if found:
            problems.append(f"{observed.label}: the {code} message holds {found}: {fuzz.describe(message, 120)}")
        table_text(observed.label, error)
    for code, seen in sorted(texts.items()):
        if len(seen) > 1:
            problems.append(f"{code} came with {len(seen)} different messages: "
                            + "; ".join(f"{fuzz.describe(m, 80)} ({where})" for m, where in list(seen.items())[:3]))
    for observed, error in _errors(world, harness):  # the sample: calls whose arguments are known
        message = error.get("message")
        echoed = messages.echo(message, observed.arguments) if isinstance(message, str) else None
        if echoed:
            problems.append(f"{observed.label}: the {spoken(error.get('code'))} message repeats the argument value "
                            f"{fuzz.describe(echoed, 60)}")
    world.evidence.add("messages_per_code", {code: len(seen) for code, seen in sorted(texts.items())})
    fail_with(problems, "refusals carry messages that vary, leak or echo")


# -- no reflection ------------------------------------------------------------------------------------


@check("envelope.no-reflection", "EMC-ENV-006",
       uses=CASE_TOOL, cases={SEARCH: (CAPTURE, ADMIT, FORGET), GET: (CAPTURE, ADMIT, FORGET)})
@pytest.mark.parametrize("tool", TOOLS, ids=TOOL_IDS)
def test_no_reply_repeats_what_the_arguments_said(world: World, harness: Any, tool: str) -> None:
    """A marker planted in every string of the arguments never comes back, except a record's own content."""
    scope = world.scope
    principal = world.principal(scope, {tool})
    purpose = world.profile.purpose_ref
    state = run_state(harness)
    marker = unique("zqmark")
    problems: list[str] = []
    seen: dict[str, str] = {}

    def judge(label: str, arguments: Any, marker: str, allowed: Any = None) -> Reply:
        reply = world.call(tool, arguments, scope=scope, principal=principal, answer="decline")
        register(state, world.era, Observed(f"no-reflection {tool}: {label}", tool, arguments, reply))
        seen[label] = ("success" if reply.value is not None else
                       f"JSON-RPC {spoken((reply.error or {}).get('code'))}" if reply.kind == "error" else
                       str((reply.envelope or {}).get("error", {}).get("code")) if isinstance(reply.envelope, dict)
                       else reply.kind)
        for where in reflections(reply, marker, allowed):
            problems.append(f"{label}: the marker is repeated in {where}")
        envelope = reply.envelope if isinstance(reply.envelope, dict) else {}
        error = envelope.get("error")
        table_text(label, error if isinstance(error, dict) else {})
        return reply

    for planted in fuzz.marker_cases(tool, marker, purpose=purpose):
        judge(planted.label, planted.arguments, marker)

    if tool in (SEARCH, GET):
        # A record whose content carries a second marker: search and get may return that content, nothing else.
        own = unique("zqmark")
        content = next(p for p in fuzz.marker_cases(CAPTURE, own, purpose=purpose)
                       if p.label == "the marker in every free field")
        record_id = None
        try:
            capture_principal = world.principal(scope, {CAPTURE, ADMIT})
            reply = world.call(CAPTURE, content.arguments, scope=scope, principal=capture_principal)
            candidate = world.value(reply, "capture of marked content")["candidate_id"]
            record_id = world.admit(candidate, scope=scope, principal=capture_principal).get("record_id")
        except Blocked as blocked:
            world.evidence.add("record_with_marker", f"not made: {blocked}")
        if isinstance(record_id, str):
            arguments = ({"query": own, "purpose_ref": purpose} if tool == SEARCH
                         else {"record_id": record_id, "purpose_ref": purpose})
            reply = judge("a record holding the caller's marked content", arguments, own, record_content(tool))
            returned = [p for p in hits(reply.envelope, own.lower()[:12]) if record_content(tool)(p)]
            world.evidence.add("marker_in_returned_content", bool(returned))
            forget = {"record_id": record_id, "idempotency_key": fresh_key(), "reason_ref": "reason:conformance"}
            world.call(FORGET, forget, scope=scope, principal=world.principal(scope, {FORGET}), answer="accept")
    world.evidence.add("outcomes", seen)
    fail_with(problems, f"replies of {tool} repeat the caller's input")


@check("envelope.audit-id", "EMC-ENV-002", "EMC-ENV-003", "EMC-HP-052", uses=SERVED)
def test_every_envelope_has_its_own_audit_id(world: World, harness: Any) -> None:
    """auditId is a string never seen before in the run: the host mints a fresh one for every call, so a repeat
    means the target did not echo it (host.audit-echo compares each with the one sent)."""
    observed = envelopes(world, harness)
    state = run_state(harness)
    problems = []
    for item, envelope in observed:
        audit_id = envelope.get("auditId") if isinstance(envelope, dict) else None
        if not isinstance(audit_id, str):
            problems.append(f"{item.label}: auditId is {spoken(audit_id)}")
        else:
            pin(
                AUDIT_PIN,
                AUDIT_MIN <= len(audit_id) <= AUDIT_MAX,
                f"{item.label}: auditId has {len(audit_id)} characters",
            )
    problems += [f"auditId {where}" for where in state.repeated]
    world.evidence.add("audit_ids_seen", len(state.audit_ids))
    fail_with(problems, "auditIds are missing or repeated")
