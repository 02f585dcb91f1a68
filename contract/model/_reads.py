"""search and get: what they may return (only current records of the bound scope), and how pages chain.

    get: NOT_FOUND for an unknown, out-of-scope or not currently eligible record, alike (EMC-GET-003); the record
        asked for otherwise, by its record_id (EMC-GET-002), or PROJECTION_OVERSIZED (EMC-GET-004).
    search: records[] holds only accepted_current records of the bound scope (EMC-LIFE-001, EMC-HOST-005, and
        never a forgotten one, EMC-FGT-002), at most limit of them (EMC-SRCH-003), each with record.record_id
        (EMC-SRCH-011) and its packet within max_packet_bytes (EMC-SRCH-005); an empty list means no match
        (EMC-SRCH-012); next_page_cursor, sent back with the same query and parameters, returns the following
        records and none from an earlier page (EMC-SRCH-009).
    Both are read-only: they change nothing later calls can observe.

The model knows a match only for a query the caller owns (``Call.exhaustive``: a word only its own records
hold); for other queries it judges what is returned, never what is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engram_mcp.contract._canonical import canonical_bytes
from engram_mcp.contract._loader import load
from engram_mcp.contract.model._call import Call, HostFacts, Observation, member
from engram_mcp.contract.model._expect import TRANSIENT, Alternative, Expectation, Problem, cited
from engram_mcp.contract.model._state import CandidateState, Page, RecordState, Scope, State, words_of
from engram_mcp.contract.model._visibility import surely_fits, visibility

_CONTRACT = load()
LIMIT_DEFAULT = _CONTRACT.limit("search.limit.default")
BUDGET_DEFAULT = _CONTRACT.limit("max_packet_bytes.default")
POLICY_DEFAULT = {"minimum_channels": "lexical", "network": "forbid"}  # §2: predeterminado lexical / forbid
OVERSIZED = frozenset({"PROJECTION_OVERSIZED", "RESULT_TOO_LARGE"})


def _size(value: Any) -> int:
    return len(canonical_bytes(value, normalize=False))


# -- get -----------------------------------------------------------------------------------------------------------


def get(state: State, facts: HostFacts, call: Call) -> Expectation:
    ident = call.arguments["record_id"]
    budget = call.arguments.get("max_packet_bytes", BUDGET_DEFAULT)
    record = state.record(call.scope, ident)
    hidden = Alternative("NOT_FOUND", "refusal", frozenset({"NOT_FOUND"}), cited("EMC-GET-003"))
    if record is None:
        where = "outside the bound scope" if state.record_elsewhere(call.scope, ident) else "never issued"
        return Expectation("get.invisible", f"get of a record {where}", (hidden,),
                           cited("EMC-GET-003", "EMC-HOST-005") if where != "never issued" else cited("EMC-GET-003"))
    if record.state is RecordState.DOUBTFUL:
        return Expectation("get.doubtful", "get of a record whose state could not be judged", (), (), judged=False)
    seen = visibility(record, call.now_ms, facts.clock_skew_ms)
    if seen == "hidden":
        why = "forgotten" if record.state is RecordState.TOMBSTONED else "past its expires_at"
        return Expectation(f"get.{'forgotten' if why == 'forgotten' else 'expired'}", f"get of a record {why}",
                           (hidden,), cited("EMC-GET-003", "EMC-LIFE-001")
                           + (cited("EMC-FGT-002") if why == "forgotten" else ()))

    def check(observation: Observation) -> list[Problem]:
        value = observation.value or {}
        problems = []
        returned = member(value, "record")
        receipt = member(value, "read_receipt")
        if returned.get("record_id") != ident or receipt.get("record_id") != ident:
            problems.append(Problem("EMC-GET-002", "the record (or read_receipt) returned names another record_id "
                                                   "than the one asked for"))
        packet = {k: value[k] for k in ("record", "redacted_fields", "redaction_receipt_digest") if k in value}
        if _size(packet) > budget:
            problems.append(Problem("EMC-SRCH-005", f"the record's packet is {_size(packet)} bytes, over the "
                                                    f"budget of {budget}"))
        return problems

    alternatives: tuple[Alternative, ...] = (Alternative("record", "success", cites=cited("EMC-GET-002"),
                                                         check=check),)
    if not surely_fits(record.content, budget):
        alternatives += (Alternative("PROJECTION_OVERSIZED", "refusal", frozenset({"PROJECTION_OVERSIZED"}),
                                     cited("EMC-GET-004")),)
    if seen == "either":
        alternatives += (hidden,)
    return Expectation("get.current", "get of a current record of the bound scope", alternatives,
                       cited("EMC-GET-002"))


# -- search ------------------------------------------------------------------------------------------------------


def _request(arguments: Mapping[str, Any]) -> bytes:
    """The query and its effective parameters: a default left out or spelled out is the same request."""
    policy = {**POLICY_DEFAULT, **(arguments.get("capability_policy") or {})}
    return canonical_bytes({"query": arguments["query"], "limit": arguments.get("limit", LIMIT_DEFAULT),
                            "max_packet_bytes": arguments.get("max_packet_bytes", BUDGET_DEFAULT),
                            "capability_policy": policy}, normalize=False)


def _matching(state: State, facts: HostFacts, call: Call) -> frozenset[str]:
    """Visible records of the bound scope holding every word of a query the caller owns."""
    wanted = words_of(call.arguments["query"])
    return frozenset(ident for (scope, ident), record in state.records.items()
                     if scope == call.scope and wanted and wanted <= record.content.words
                     and visibility(record, call.now_ms, facts.clock_skew_ms) == "visible")


def _leak(state: State, scope: Scope, texts: tuple[str, ...]) -> str | None:
    """Which requirement a returned record of unknown id breaks, when its text is a known candidate's that no
    visible record of the scope shares."""
    if not texts:
        return None
    for record in state.records.values():
        if record.scope == scope and record.content.texts == texts and record.state is RecordState.CURRENT:
            return None
    for candidate in state.candidates.values():
        if candidate.content.texts == texts and candidate.state is not CandidateState.DOUBTFUL:
            return "EMC-LIFE-001" if candidate.scope == scope else "EMC-HOST-005"
    return None


def _texts(packet: Mapping[str, Any]) -> tuple[str, ...]:
    record = member(packet, "record")
    components = record.get("components")
    if not isinstance(components, list):
        return ()
    return tuple(str(c.get("text", "")) for c in components if isinstance(c, Mapping))


def _page_problems(state: State, facts: HostFacts, call: Call, value: Mapping[str, Any]) -> list[Problem]:
    """What every search page must hold, whatever the situation: only visible records, each bounded."""
    limit = call.arguments.get("limit", LIMIT_DEFAULT)
    budget = call.arguments.get("max_packet_bytes", BUDGET_DEFAULT)
    packets = value.get("records")
    if not isinstance(packets, list):
        return [Problem("EMC-SRCH-011", "the page carries no records list")]
    problems = []
    if len(packets) > limit:
        problems.append(Problem("EMC-SRCH-003", f"{len(packets)} records on a page whose limit is {limit}"))
    for n, packet in enumerate(packets):
        record = packet.get("record") if isinstance(packet, Mapping) else None
        ident = record.get("record_id") if isinstance(record, Mapping) else None
        if not isinstance(ident, str):
            problems.append(Problem("EMC-SRCH-011", f"records[{n}] carries no record.record_id"))
            continue
        if _size(packet) > budget:
            problems.append(Problem("EMC-SRCH-005", f"records[{n}]'s packet is {_size(packet)} bytes, over the "
                                                    f"budget of {budget}"))
        known = state.record(call.scope, ident)
        if known is not None:
            if visibility(known, call.now_ms, facts.clock_skew_ms) == "hidden":
                rid = "EMC-FGT-002" if known.state is RecordState.TOMBSTONED else "EMC-LIFE-001"
                problems.append(Problem(rid, f"records[{n}] is a record that is "
                                             f"{'forgotten' if rid == 'EMC-FGT-002' else 'past its expires_at'}"))
        elif state.record_elsewhere(call.scope, ident) is not None:
            problems.append(Problem("EMC-HOST-005", f"records[{n}] is a record of another scope"))
        elif (leaked := _leak(state, call.scope, _texts(packet))) is not None:
            problems.append(Problem(leaked, f"records[{n}] holds the content of a candidate that is "
                                            + ("not a current record" if leaked == "EMC-LIFE-001"
                                               else "in another scope")))
    return problems


def search(state: State, facts: HostFacts, call: Call) -> Expectation:
    arguments = call.arguments
    cursor = arguments.get("page_cursor")
    request = _request(arguments)
    chain = state.pages.get(cursor) if isinstance(cursor, str) else None
    continuing = chain is not None and (chain.scope, chain.principal, chain.request) == (
        call.scope, call.principal, request)
    if continuing and chain is not None:
        required, before = chain.required, chain.seen
        changed = chain.version != state.version(call.scope)
        situation = "search.continuation-after-change" if changed else "search.continuation"
        describe = "the next page of a search, under its cursor" + (
            ", after the scope changed" if changed else "")
    else:
        required = _matching(state, facts, call) if call.exhaustive and cursor is None else frozenset()
        before = frozenset()
        situation, describe = _first_page(cursor, chain, call, request)
    budget = arguments.get("max_packet_bytes", BUDGET_DEFAULT)

    def check(seen: Observation) -> list[Problem]:
        value = seen.value or {}
        problems = _page_problems(state, facts, call, value)
        returned = [p.get("record", {}).get("record_id") for p in value.get("records") or []
                    if isinstance(p, Mapping) and isinstance(p.get("record"), Mapping)]
        repeated = set(returned) & before
        if repeated or len(set(returned)) < len(returned):
            problems.append(Problem("EMC-SRCH-009", f"{len(repeated) or 'some'} record(s) returned again that an "
                                                    "earlier page of the same search held"))
        missing = _still_required(state, facts, call, required) - before - set(returned)
        fitting = {m for m in missing if surely_fits(_content(state, call.scope, m), budget)}
        if fitting and not returned:
            problems.append(Problem("EMC-SRCH-012", f"an empty page while {len(fitting)} current matching "
                                                    "record(s) were never returned"))
        elif fitting and not value.get("next_page_cursor"):
            problems.append(Problem("EMC-SRCH-012" if not before else "EMC-SRCH-009",
                                    f"the search ended without {len(fitting)} current matching record(s)"))
        return problems

    def paged(state: State, seen: Observation) -> State:
        value = seen.value or {}
        following = value.get("next_page_cursor")
        if not isinstance(following, str):
            return state
        returned = {p["record"]["record_id"] for p in value.get("records") or []
                    if isinstance(p, Mapping) and isinstance(p.get("record"), Mapping)
                    and isinstance(p["record"].get("record_id"), str)}
        return state.with_page(following, Page(call.scope, call.principal, request, required,
                                               frozenset(before | returned), state.version(call.scope)))

    alternatives: list[Alternative] = [Alternative("page", "success", cites=cited(
        "EMC-LIFE-001", "EMC-HOST-005", "EMC-SRCH-003", "EMC-SRCH-011"), check=check, effect=paged)]
    semantic = (arguments.get("capability_policy") or {}).get("minimum_channels") == "lexical_and_semantic"
    if semantic:
        alternatives.append(Alternative("RANKING_UNAVAILABLE", "refusal", frozenset({"RANKING_UNAVAILABLE"}),
                                        cited("EMC-SRCH-008")))
    if cursor is not None and (not continuing or (chain is not None and chain.version != state.version(call.scope))):
        alternatives.append(Alternative("STALE_PAGE", "refusal", frozenset({"STALE_PAGE"}), cited("EMC-SRCH-009")))
    if not call.exhaustive or any(not surely_fits(_content(state, call.scope, m), budget) for m in required):
        alternatives.append(Alternative("oversized", "refusal", OVERSIZED, cited("EMC-SRCH-012")))
    cites = cited("EMC-LIFE-001", "EMC-HOST-005") + (cited("EMC-SRCH-009") if continuing else ())
    return Expectation(situation, describe, tuple(alternatives), cites,
                       transient=TRANSIENT - ({"RANKING_UNAVAILABLE"} if semantic else set()))


def _first_page(cursor: Any, chain: Page | None, call: Call, request: bytes) -> tuple[str, str]:
    if cursor is None:
        return "search.first-page", "a search"
    if chain is None:
        return "search.unknown-cursor", "a search under a cursor the server never returned"
    if chain.scope != call.scope:
        return "search.foreign-cursor", "a search under a cursor returned in another scope"
    if chain.principal != call.principal:
        return "search.other-principal-cursor", "a search under a cursor returned to another principal"
    return "search.changed-request", "a search under a cursor returned for another query or other parameters"


def _still_required(state: State, facts: HostFacts, call: Call, required: frozenset[str]) -> set[str]:
    """The records a chain had to find that are still visible now (one forgotten since need not appear)."""
    out = set()
    for ident in required:
        record = state.record(call.scope, ident)
        if record is not None and visibility(record, call.now_ms, facts.clock_skew_ms) == "visible":
            out.add(ident)
    return out


def _content(state: State, scope: Scope, ident: str) -> Any:
    record = state.record(scope, ident)
    assert record is not None, "a required record is one the model holds"
    return record.content
