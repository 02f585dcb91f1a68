"""Search and the packet budget: limits, paging, stale cursors, ranking channels, sizes and what may be seen.

Each era builds its own private corpora in the check's scope, every record
carrying a marker word found nowhere else, so a query for the marker knows
exactly which records it must (and must not) return.
"""

from __future__ import annotations

import itertools
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

import pytest

from engram_mcp.conformance._checks import check, pin, require
from engram_mcp.conformance._connect import Reply
from engram_mcp.conformance._needs import ADMIT, CAPTURE, CASE_TOOL, FORGET, GET, SEARCH, WITHDRAW
from engram_mcp.conformance._profile import ScopeProfile
from engram_mcp.conformance._tracker import plant
from engram_mcp.conformance._words import spoken
from engram_mcp.conformance._world import World, fresh_key, unique, unknown_record
from engram_mcp.contract import canonical_bytes, load, profile_digest, record_id

CONTRACT = load()
DEFAULT_LIMIT = CONTRACT.limit("search.limit.default")
MAX_LIMIT = CONTRACT.limit("search.limit.max")
BUDGET_MIN, BUDGET_MAX = CONTRACT.limit("max_packet_bytes.min"), CONTRACT.limit("max_packet_bytes.max")
BUDGET_DEFAULT = CONTRACT.limit("max_packet_bytes.default")
CURSOR_MAX = CONTRACT.limit("page_cursor.max_bytes")
RECORD_ID = re.compile(r"mem_[a-z2-7]+")
LEXICAL = {"minimum_channels": "lexical", "network": "forbid"}
CORPUS_SIZE = DEFAULT_LIMIT + 2  # more matches than the default limit, so the default is observable
BULKY_SIZE, BULKY_TEXT = 8, 9000  # together well over max_packet_bytes.default
OVERSIZED_TEXT = 6000  # one record alone over max_packet_bytes.min
# Scope roles, named with what the profile must state for a check that needs one.


# -- corpora -------------------------------------------------------------------------


@dataclass
class Corpus:
    marker: str
    ids: list[str] = field(default_factory=list)


_CORPORA: dict[tuple[int, str], Corpus] = {}


def marked_text(marker: str, index: int, size: int | None = None) -> str:
    text = f"Decision {marker} entry {index}: keep the ledger in one database."
    filler = 0
    while size is not None and len(text.encode("utf-8")) < size:
        filler += 1
        text += f" Rationale paragraph {filler} repeats why one ledger database keeps reconciliation simple."
    return text


def corpus(world: World, name: str = "small", count: int = CORPUS_SIZE, size: int | None = None) -> Corpus:
    """``count`` accepted records in the check's scope, each carrying the corpus's marker; built once per era."""
    key = (id(world.conn), name)
    if key not in _CORPORA:
        built = Corpus(unique("srch"))
        for index in range(count):
            built.ids.append(world.accepted_record(text=marked_text(built.marker, index, size))[0])
        _CORPORA[key] = built
    return _CORPORA[key]


# -- calls ---------------------------------------------------------------------------


def search(world: World, query: str, *, scope: ScopeProfile | None = None, principal: str | None = None,
           **options: Any) -> Reply:
    """A search for a marker word of the check's own: the model knows every record it can match."""
    return world.search(query, scope=scope, principal=principal, owned=True, **options)


def get(world: World, rid: str, *, scope: ScopeProfile | None = None, principal: str | None = None,
        **options: Any) -> Reply:
    return world.get(rid, scope=scope, principal=principal, **options)


def outcome(reply: Reply) -> str:
    if reply.kind == "result":
        envelope = reply.envelope
        return "ok" if isinstance(envelope, dict) and envelope.get("ok") is True else str(reply.code)
    return f"jsonrpc:{reply.code}" if reply.kind == "error" else reply.kind


def value_of(reply: Reply) -> dict[str, Any] | None:
    return reply.envelope["output"]["value"] if outcome(reply) == "ok" else None


def ids(value: dict[str, Any]) -> list[str]:
    return [entry.get("record", {}).get("record_id") for entry in value.get("records", [])]


def size(value: Any) -> int:
    return len(canonical_bytes(value, normalize=False))


def first_page(world: World, marked: Corpus, **options: Any) -> dict[str, Any]:
    """The first page for the corpus's marker; BLOCKED unless it succeeds and has a cursor."""
    value = world.value(search(world, marked.marker, **options), "search for the corpus")
    require(value.get("next_page_cursor"), "a search matching more records than its limit returned no cursor")
    return value


def flipped(token: str) -> str:
    """The token with one character in its middle changed (never a padding bit at its end)."""
    middle = len(token) // 2
    return token[:middle] + ("A" if token[middle] != "A" else "B") + token[middle + 1:]


# -- limits and paging -----------------------------------------------------------------


@check("search.limit", "EMC-SRCH-003", uses=(CAPTURE, ADMIT, SEARCH))
@pytest.mark.parametrize("limit", [3, None], ids=["limit-3", "default"])
def test_a_page_holds_at_most_the_limit(world: World, limit: int | None) -> None:
    """With more matches than the limit, a page holds at most limit records, or search.limit.default when it is
    left out."""
    marked = corpus(world)
    options: dict[str, Any] = {"limit": limit} if limit is not None else {}
    reply = search(world, marked.marker, **options)
    world.expect(reply, f"a search with {'limit ' + str(limit) if limit else 'the default limit'}")
    value = world.value(reply, "search for the corpus")
    bound = limit if limit is not None else DEFAULT_LIMIT
    world.evidence.add("page", {"matches": len(marked.ids), "returned": len(value["records"]), "bound": bound,
                                "cursor": "next_page_cursor" in value})


@check("search.paging", "EMC-SRCH-009", "EMC-HP-049", "EMC-SRCH-017", uses=(CAPTURE, ADMIT, SEARCH))
def test_paging_returns_every_match_once(world: World) -> None:
    """Following next_page_cursor with limit 2 yields every match exactly once and ends without a cursor; ranks
    increase across pages (this profile)."""
    marked = corpus(world)
    seen: list[str] = []
    ranks: list[int] = []
    pages, cursor = 0, None
    while True:
        options: dict[str, Any] = {"limit": 2, **({"page_cursor": cursor} if cursor else {})}
        reply = search(world, marked.marker, **options)
        world.expect(reply, f"page {pages + 1} of a search with limit 2")
        value = world.value(reply, f"page {pages + 1}")
        pages += 1
        seen += ids(value)
        ranks += [entry.get("rank") for entry in value["records"]]
        cursor = value.get("next_page_cursor")
        if cursor is None:
            break
        pin("EMC-HP-049", len(cursor.encode("utf-8")) <= CURSOR_MAX,
            f"a cursor of {len(cursor.encode('utf-8'))} bytes, over page_cursor.max_bytes")
        require(pages <= len(marked.ids) + 2, "paging does not end")
    world.evidence.add("paging", {"pages": pages, "records": len(seen), "matches": len(marked.ids), "ranks": ranks})
    pin("EMC-SRCH-017", all(isinstance(r, int) for r in ranks) and all(a < b for a, b in itertools.pairwise(ranks)),
        f"ranks do not increase across pages: {spoken(ranks)}")


@check("search.cursor-defaults", "EMC-HP-049", "EMC-SRCH-009", uses=(CAPTURE, ADMIT, SEARCH))
def test_a_default_left_out_or_spelled_out_is_the_same_request(world: World) -> None:
    """A cursor minted with the defaults left out continues a request that spells the same defaults out."""
    marked = corpus(world)
    first = first_page(world, marked)
    spelled: dict[str, Any] = {"limit": DEFAULT_LIMIT, "max_packet_bytes": BUDGET_DEFAULT,
                               "capability_policy": dict(LEXICAL)}
    reply = search(world, marked.marker, page_cursor=first["next_page_cursor"], **spelled)
    world.evidence.add("continuation", outcome(reply))
    world.expect(reply, "the next page, under the same request with its defaults spelled out")


STALE_CASES = ["changed-query", "changed-limit", "changed-budget", "changed-policy", "tampered", "forged",
               "other-principal", "other-scope", "new-admission"]


@check("search.stale-cursor", "EMC-SRCH-010", "EMC-HP-050", uses=(CAPTURE, ADMIT, SEARCH))
@pytest.mark.parametrize("case", STALE_CASES)
def test_a_cursor_that_cannot_be_honoured_is_stale(world: World, case: str) -> None:
    """A cursor with other arguments, altered, forged, from another principal or scope, or outdated is STALE_PAGE."""
    marked = corpus(world)
    scope = world.scope
    first = first_page(world, marked, limit=2)
    cursor = first["next_page_cursor"]
    query, options, principal, where = marked.marker, {"limit": 2, "page_cursor": cursor}, None, None
    if case == "changed-query":
        query = f"{marked.marker} ledger"
    elif case == "changed-limit":
        options["limit"] = 3
    elif case == "changed-budget":
        options["max_packet_bytes"] = BUDGET_DEFAULT - 1
    elif case == "changed-policy":
        options["capability_policy"] = {"minimum_channels": "lexical", "network": "allow"}
    elif case == "tampered":
        options["page_cursor"] = flipped(cursor)
    elif case == "forged":
        options["page_cursor"] = secrets.token_urlsafe(max(16, min(len(cursor), CURSOR_MAX) * 3 // 4))
    elif case == "other-principal":
        minted_by = world.principal(scope, {SEARCH})
        others = sorted(p for p, granted in scope.principals.items() if SEARCH in granted and p != minted_by)
        if not others:
            pytest.skip(f"the profile grants search to one principal of {scope.label}: a cursor of another "
                        "principal needs two, so naming a second principal granted search there unlocks this case")
        principal = others[0]
    elif case == "other-scope":
        where = world.profile.sibling_workspace(world.scope) or world.profile.other_tenant(world.scope)
        if where is None or where.principal_with({SEARCH}) is None:
            pytest.skip("the profile names one scope with a principal granted search: a cursor from another scope "
                        "needs two, so a sibling workspace or another tenant's scope unlocks this case")
        principal = where.principal_with({SEARCH})
    elif case == "new-admission":
        control = search(world, query, **options)
        require(outcome(control) == "ok", f"the genuine continuation failed ({outcome(control)})")
        marked.ids.append(world.accepted_record(text=marked_text(marked.marker, len(marked.ids)))[0])
    reply = search(world, query, scope=where, principal=principal, **options)
    world.evidence.add("reply", outcome(reply))
    world.expect(reply, f"a search under a {case} cursor")
    if case != "new-admission":
        control = search(world, marked.marker, limit=2, page_cursor=cursor)
        world.evidence.add("genuine_continuation", outcome(control))
        require(outcome(control) == "ok", f"the genuine continuation failed too ({outcome(control)})")
        world.expect(control, "the genuine continuation")


@check("search.cursor-isolation", "EMC-HOST-005", uses=(CAPTURE, ADMIT, SEARCH))
@pytest.mark.parametrize("other", ["sibling-workspace", "other-tenant"])
def test_a_cursor_replayed_in_another_scope_shows_none_of_its_records(world: World, other: str) -> None:
    """A cursor minted in the check's scope, sent back in another scope, is refused or answered with none of the
    primary scope's records: a cursor is no way around the scope binding."""
    where = world.role("second-workspace" if other == "sibling-workspace" else "second-tenant")
    principal = world.principal(where, {SEARCH})
    marked = corpus(world, "isolation", 3)
    first = first_page(world, marked, limit=1)
    reply = search(world, marked.marker, scope=where, principal=principal, limit=1,
                   page_cursor=first["next_page_cursor"])
    world.evidence.add("reply", outcome(reply))
    world.expect(reply, f"a search bound to {other} under a cursor of the check's scope")


@check("search.cursor-after-forget", "EMC-FGT-002", uses=(CAPTURE, ADMIT, SEARCH, FORGET))
def test_a_cursor_minted_before_a_forget_never_serves_the_forgotten_record(world: World) -> None:
    """A search chain begun before a forget, continued after it, never returns the forgotten record (it may end
    STALE_PAGE): a cursor is no way around erasure."""
    marked = corpus(world, "forget", 4)
    first = first_page(world, marked, limit=1)
    shown = set(ids(first))
    later = [rid for rid in marked.ids if rid not in shown]
    for rid in later[:2]:  # records the chain has not shown yet: its next pages would hold them
        world.value(world.call(FORGET, {"record_id": rid, "idempotency_key": fresh_key(),
                                        "reason_ref": "reason:conformance-cursor"}), "forget")
    cursor, pages = first["next_page_cursor"], list[str]()
    while cursor and len(pages) < len(marked.ids):
        reply = search(world, marked.marker, limit=1, page_cursor=cursor)
        pages.append(outcome(reply))
        world.expect(reply, "the next page of a search begun before a forget")
        value = value_of(reply)
        cursor = value.get("next_page_cursor") if value is not None else None
    world.evidence.add("continuation", {"forgotten": len(later[:2]), "pages": pages})


@check("search.cursor-out-of-bounds", "EMC-SRCH-010", "EMC-HP-050", uses=SEARCH)
@pytest.mark.parametrize("case", ["empty", "too-long"])
def test_a_cursor_outside_its_schema_bounds_is_invalid(world: World, case: str) -> None:
    """A page_cursor outside its schema bounds is INVALID_SCHEMA, not STALE_PAGE."""
    cursor = "" if case == "empty" else "A" * (CURSOR_MAX + 1)
    reply = world.search("ledger", page_cursor=cursor)
    world.evidence.add("reply", outcome(reply))
    world.expect(reply, f"a page_cursor of {len(cursor)} bytes")


# -- ranking channels and the capability policy ---------------------------------------------


def ranking(value: dict[str, Any]) -> dict[str, Any]:
    """What a ranking decides: the order and the scores. Labels (the receipt's profile name) a fallback may change."""
    return {"order": ids(value), "scores": [entry.get("score") for entry in value["records"]]}


@check("search.semantic-unavailable", "EMC-SRCH-008", uses=(CAPTURE, ADMIT, SEARCH))
def test_a_semantic_minimum_is_never_met_by_a_silent_lexical_fallback(world: World) -> None:
    """lexical_and_semantic is RANKING_UNAVAILABLE, or a ranking that differs from the lexical one — never the
    lexical answer.

    The harness cannot see whether a target has a semantic channel. A target without
    one must refuse; a target with one ranks with it, which changes the scores even
    where the order happens to agree. A success identical in order and scores to the
    lexical-only answer is therefore the lexical answer — relabelled or not, the
    silent fallback the contract forbids.
    """
    marked = corpus(world)
    semantic = search(world, marked.marker, limit=MAX_LIMIT,
                      capability_policy={"minimum_channels": "lexical_and_semantic", "network": "forbid"})
    world.evidence.add("semantic", outcome(semantic))
    world.expect(semantic, "a search whose policy asks for the semantic channel")
    if outcome(semantic) == "RANKING_UNAVAILABLE":
        return
    lexical = world.value(
        search(world, marked.marker, limit=MAX_LIMIT, capability_policy=dict(LEXICAL)), "lexical search"
    )
    semantic_value = world.value(semantic, "semantic search")
    labels = {name: value.get("rank_receipt", {}).get("profile") for name, value in
              (("semantic", semantic_value), ("lexical", lexical))}
    world.evidence.add("rankings", {"semantic": ranking(semantic_value), "lexical": ranking(lexical),
                                    "profiles": labels})
    assert ranking(semantic_value) != ranking(lexical), (
        "lexical_and_semantic answered exactly the lexical ranking (order and scores): a silent lexical fallback"
        + (" under another profile name" if labels["semantic"] != labels["lexical"] else ""))


@check("search.capability-policy", "EMC-SRCH-006", "EMC-SRCH-007", uses=(CAPTURE, ADMIT, SEARCH))
@pytest.mark.parametrize("policy", ["explicit-default", "network-allow"])
def test_the_capability_policy_changes_nothing_the_host_did_not_grant(world: World, policy: str) -> None:
    """{lexical, forbid} spelled out, and network: allow (which grants nothing), give the same records in the same
    order as no capability_policy."""
    marked = corpus(world)
    omitted = world.value(search(world, marked.marker, limit=MAX_LIMIT), "search without capability_policy")
    sent = dict(LEXICAL) if policy == "explicit-default" else {"minimum_channels": "lexical", "network": "allow"}
    reply = search(world, marked.marker, limit=MAX_LIMIT, capability_policy=sent)
    world.evidence.add("reply", outcome(reply))
    world.expect(reply, f"a search with capability_policy {spoken(sent)}")
    value = value_of(reply)
    assert value is not None, f"capability_policy {spoken(sent)} gave {outcome(reply)}"
    world.evidence.add("orders", {"omitted": ids(omitted), "sent": ids(value)})
    assert ids(value) == ids(omitted), f"capability_policy {spoken(sent)} changed the records or their order"


# -- the packet budget ---------------------------------------------------------------------------


@check("search.packet-bounds", "EMC-SRCH-004", uses=CASE_TOOL)
@pytest.mark.parametrize("budget", [BUDGET_MIN - 1, BUDGET_MAX + 1, BUDGET_MIN, BUDGET_MAX])
@pytest.mark.parametrize("tool", [SEARCH, GET])
def test_max_packet_bytes_outside_its_bounds_is_invalid(world: World, tool: str, budget: int) -> None:
    """max_packet_bytes outside max_packet_bytes.min..max is INVALID_SCHEMA on search and get; the bounds are
    accepted. The arguments are judged before anything is looked up, so no record is needed: a query of a marker
    nothing carries, and a record id nobody issued (answered NOT_FOUND once the budget is accepted);
    search.packet-budget serves real records at the bounds."""
    if tool == SEARCH:
        reply = search(world, unique("bounds"), limit=1, max_packet_bytes=budget)
    else:
        reply = get(world, unknown_record(), max_packet_bytes=budget)
    world.evidence.add("reply", outcome(reply))
    world.expect(reply, f"{tool.removeprefix('engram_memory_')} with max_packet_bytes {budget}")


@check("search.packet-budget", "EMC-SRCH-005", "EMC-SRCH-015", uses=(CAPTURE, ADMIT, CASE_TOOL))
@pytest.mark.parametrize(("tool", "budget"), [(SEARCH, BUDGET_MIN), (SEARCH, 16384), (SEARCH, None), (GET, BUDGET_MIN),
                                         (GET, None)], ids=["search-min", "search-16384", "search-default",
                                                            "get-min", "get-default"])
def test_a_value_never_exceeds_the_budget(world: World, tool: str, budget: int | None) -> None:
    """Every record packet of a search page or a get is within max_packet_bytes (or its default); so is the whole
    value, in this profile."""
    bound = budget or BUDGET_DEFAULT
    options: dict[str, Any] = {"max_packet_bytes": budget} if budget else {}
    # Small records where one must fit the minimum budget; bulky ones, together over the budget, elsewhere.
    marked = corpus(world) if budget == BUDGET_MIN else corpus(world, "bulky", BULKY_SIZE, BULKY_TEXT)
    sizes: list[int] = []
    if tool == GET:
        reply = get(world, marked.ids[0], **options)
        world.expect(reply, f"get within a budget of {bound}")
        sizes.append(size(world.value(reply, "get")))
    else:
        cursor = None
        for _ in range(3):
            page: dict[str, Any] = {"limit": MAX_LIMIT, **options, **({"page_cursor": cursor} if cursor else {})}
            reply = search(world, marked.marker, **page)
            world.expect(reply, f"a search page within a budget of {bound}")
            value = world.value(reply, "search")
            sizes.append(size(value))
            require(value["records"], "a page of the corpus came back empty")
            cursor = value.get("next_page_cursor")
            if cursor is None:
                break
    world.evidence.add("sizes", {"budget": bound, "values": sizes})
    pin("EMC-SRCH-015", max(sizes) <= bound,
        f"a {tool.removeprefix('engram_memory_')} value of {max(sizes)} bytes exceeds {bound} as a whole")


def oversized_record(world: World) -> tuple[str, str]:
    """(marker, record_id) of one admitted record whose packet alone exceeds max_packet_bytes.min."""
    marked = corpus(world, "oversized", 1, OVERSIZED_TEXT)
    return marked.marker, marked.ids[0]


@check("search.oversized-record", "EMC-SRCH-013", uses=(CAPTURE, ADMIT, SEARCH))
def test_a_record_over_the_budget_is_projection_oversized(world: World) -> None:
    """When the first match alone exceeds the budget, search is PROJECTION_OVERSIZED, never an empty page with a
    cursor."""
    marker, _ = oversized_record(world)
    reply = search(world, marker, max_packet_bytes=BUDGET_MIN)
    value = value_of(reply)
    world.evidence.add("reply", {"outcome": outcome(reply),
                                 "records": len(value["records"]) if value else None,
                                 "cursor": bool(value and value.get("next_page_cursor"))})
    assert not (value is not None and not value["records"] and value.get("next_page_cursor")), (
        "an empty page with a cursor was returned for a record over the budget")
    assert outcome(reply) == "PROJECTION_OVERSIZED", f"a match over the budget gave {outcome(reply)}"


@check("search.oversized-get", "EMC-GET-004", uses=(CAPTURE, ADMIT, GET))
def test_get_of_a_record_over_the_budget_is_projection_oversized(world: World) -> None:
    """get with a budget the record's packet does not fit is PROJECTION_OVERSIZED; within the default it is served."""
    _, rid = oversized_record(world)
    control = get(world, rid)
    require(outcome(control) == "ok", f"the record cannot be read within the default budget ({outcome(control)})")
    reply = get(world, rid, max_packet_bytes=BUDGET_MIN)
    world.evidence.add("reply", {"default": outcome(control), "min_budget": outcome(reply),
                                 "packet_bytes": size(value_of(control))})
    world.expect(reply, "get of a record over the budget")
    assert outcome(reply) == "PROJECTION_OVERSIZED", f"a packet over the budget gave {outcome(reply)}"


# -- what a page carries ---------------------------------------------------------------------------


@check("search.record-id", "EMC-SRCH-011", uses=(CAPTURE, ADMIT, SEARCH))
def test_every_search_record_carries_its_record_id(world: World) -> None:
    """Every entry of records carries record.record_id, and it is one of the matching records."""
    marked = corpus(world)
    reply = search(world, marked.marker, limit=MAX_LIMIT)
    world.expect(reply, "a search for the corpus")
    found = ids(world.value(reply, "search for the corpus"))
    world.evidence.add("records", len(found))
    require(found, "the corpus's admitted records are not found at all")
    assert all(isinstance(r, str) and RECORD_ID.fullmatch(r) for r in found), "a record without a well-formed record_id"


@check("get.record-id", "EMC-GET-002", uses=(CAPTURE, ADMIT, GET))
def test_get_returns_the_record_asked_for(world: World) -> None:
    """get of a current record returns that record: record.record_id and read_receipt.record_id are the id asked
    for (whatever the digests around them, which are this profile's: wiring.digests-recompute)."""
    marked = corpus(world)
    for rid in marked.ids[:3]:
        reply = get(world, rid)
        world.expect(reply, "get of a current record")
        require(reply.value is not None, f"get of a current record answered {outcome(reply)}")
    world.evidence.add("records_read", min(3, len(marked.ids)))


@check("search.response-digest", "EMC-HP-046", uses=(CAPTURE, ADMIT, SEARCH))
def test_the_response_digest_recomputes(world: World) -> None:
    """response_digest is profile_digest('search-response') over the value without it, on a page with and without a
    cursor."""
    marked = corpus(world)
    page = first_page(world, marked, limit=DEFAULT_LIMIT)
    last = world.value(search(world, marked.marker, limit=DEFAULT_LIMIT, page_cursor=page["next_page_cursor"]),
                       "second page")
    for name, value in (
        ("with_cursor", page),
        ("without_cursor" if "next_page_cursor" not in last else "second", last),
    ):
        expected = profile_digest("search-response", {k: v for k, v in value.items() if k != "response_digest"})
        world.evidence.add(name, value.get("response_digest") == expected)
        assert value.get("response_digest") == expected, (
            f"response_digest does not recompute ({name.replace('_', ' ')})"
        )


NO_MATCH_CASES = ["no-match", "match", "semantic-requested", "over-budget"]


@check("search.no-match", "EMC-SRCH-012",
       uses=SEARCH, cases={
           "match": (CAPTURE, ADMIT), "semantic-requested": (CAPTURE, ADMIT), "over-budget": (CAPTURE, ADMIT)})
@pytest.mark.parametrize("case", NO_MATCH_CASES)
def test_an_empty_success_means_nothing_matched(world: World, case: str) -> None:
    """An empty success only ever means no match: a query nothing matches gets one, and a query that matches a current
    record never does — not when semantic ranking is required, nor when the record cannot fit the budget.

    The last two are the ranking and projection failures a caller can bring about: a target
    without a semantic channel must refuse (RANKING_UNAVAILABLE), and a record over the budget
    is PROJECTION_OVERSIZED; either way the failure is named, never shown as "no match".
    """
    if case == "no-match":
        reply = search(world, unique("nomatch"))
        value = value_of(reply)
        world.evidence.add("reply", {"outcome": outcome(reply), "records": len(value["records"]) if value else None})
        world.expect(reply, "a query nothing matches")
        return
    if case == "over-budget":
        marker, rid = oversized_record(world)
        options: dict[str, Any] = {"max_packet_bytes": BUDGET_MIN}
    else:
        marked = corpus(world)
        marker, rid = marked.marker, marked.ids[0]
        options = {"limit": MAX_LIMIT}
        if case == "semantic-requested":
            options["capability_policy"] = {"minimum_channels": "lexical_and_semantic", "network": "forbid"}
    if case != "match":  # the plain query is the control of the other two: it must find the record first
        control = world.value(search(world, marker, limit=MAX_LIMIT), "search for a current record's marker")
        require(
            rid in ids(control), "the admitted record is not found by its marker, so an empty answer proves nothing"
        )
    reply = search(world, marker, **options)
    value = value_of(reply)
    world.evidence.add("reply", {"outcome": outcome(reply), "records": len(value["records"]) if value else None})
    world.expect(reply, f"a query matching a current record ({case})")
    assert not (value is not None and not value["records"]), (
        f"a query matching a current record ({case}) was answered with an empty success: a failure shown as no match")
    if value is not None:
        assert rid in ids(value) or value.get("next_page_cursor"), (
            f"a query matching a current record ({case}) answered without it and without a cursor")


# -- only current records -----------------------------------------------------------------------------


def secret_line() -> str:
    """A credential assignment assembled at run time (see test_secrets.py)."""
    return plant("db_" + "pass" + "word=" + secrets.token_urlsafe(12) + "7Q")


@check("search.only-current", "EMC-LIFE-001", uses=(CAPTURE, ADMIT, SEARCH, GET), cases={"withdrawn": (WITHDRAW,)})
@pytest.mark.parametrize("state", ["pending", "rejected", "withdrawn", "pending-adjudication"])
def test_candidates_that_are_not_current_records_are_never_seen(world: World, state: str) -> None:
    """Pending, rejected, withdrawn and adjudication-pending candidates appear in no search and no get."""
    if state == "rejected":
        scope = world.role("secret-rejecting")
    elif state == "pending-adjudication":
        scope = world.role("adjudicating")
    else:
        scope = world.scope
    tools = {CAPTURE, ADMIT, SEARCH, GET} | ({WITHDRAW} if state == "withdrawn" else set())
    principal = world.principal(scope, tools)
    marker = unique("life")
    control = None
    if state != "pending-adjudication":  # a scope that adjudicates everything admits nothing to compare with
        control = world.accepted_record(text=marked_text(marker, 0), scope=scope)[0]
    text = marked_text(marker, 1) + (" " + secret_line() if state == "rejected" else "")
    _, captured = world.capture(scope=scope, principal=principal, text=text)
    candidate = captured["candidate_id"]
    if state in ("rejected", "pending-adjudication"):
        status = world.admit(candidate, scope=scope, principal=principal).get("status")
        wanted = "rejected" if state == "rejected" else "pending_adjudication"
        require(status == wanted, f"the admission in {scope.label} was {spoken(status)}, not {wanted}")
    elif state == "withdrawn":
        reply = world.call(WITHDRAW, {"candidate_id": candidate, "idempotency_key": fresh_key(),
                                      "reason_ref": "reason:conformance-search"}, scope=scope, principal=principal)
        require(outcome(reply) == "ok", f"the withdrawal failed ({outcome(reply)})")
    found = world.found(search(world, marker, scope=scope, principal=principal, limit=MAX_LIMIT),
                        f"a search for the marker a {state} candidate shares with the control record")
    hidden = record_id(captured["record_digest"]) if isinstance(captured.get("record_digest"), str) else None
    read = get(world, hidden, scope=scope, principal=principal) if hidden else None
    world.evidence.add("seen", {"scope": scope.label, "search": len(found), "control_found": control in found,
                                "get_of_candidate": outcome(read) if read else None})
    if read is not None:
        world.expect(read, f"get of the record a {state} candidate would become")
