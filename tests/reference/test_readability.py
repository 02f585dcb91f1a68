"""No unreadable records: whatever its size, an admitted record can be read, and never hides others.

A capture may be as large as ``arguments.max_bytes``, and it is committed as
pending. A record made from it carries fields the capture does not (digests,
trust, receipts), so the largest captures could not be served by ``get`` even
at ``max_packet_bytes.max``: admission rejects them (EMC-GET-006). A record
over a smaller budget is left out of a search page, its rank skipped, instead
of failing the whole search (EMC-SRCH-013).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engram_mcp.contract import canonical_bytes
from engram_mcp.contract.binding import Binding
from engram_mcp.reference._core import Engine
from engram_mcp.reference._crypto import AesGcmCipher
from engram_mcp.reference._envelope import Outcome
from engram_mcp.reference._policy import AcceptAll, ScopePolicy
from engram_mcp.reference._ports import Scope
from engram_mcp.reference._recall import Recall
from engram_mcp.reference._store import Store
from tests.reference.conftest import CONTRACT, PURPOSE, admission_args, capture_args, get_args, marker, search_args

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
SCOPE = Scope("tenant-a", "workspace-1")
ARGUMENTS_MAX = CONTRACT.limit("arguments.max_bytes")
BUDGET_MAX = CONTRACT.limit("max_packet_bytes.max")
BUDGET_DEFAULT = CONTRACT.limit("max_packet_bytes.default")
TEXT_MAX = CONTRACT.limit("capture.component.text.max_bytes")


def caller() -> Binding:
    return Binding(tenant=SCOPE.tenant, workspace=SCOPE.workspace, principal="agent-1", agent_id="agent",
                   session="session", purpose_ref=PURPOSE, issuer="host", audience="aud", issued_at=0, expires_at=0,
                   token_id="jti-1")


class Engines:
    """An Engine on a real SQLite file that admits everything its size allows."""

    def __init__(self, path: Path) -> None:
        self.store = Store(path)
        policy = ScopePolicy(admission=AcceptAll(), allow_retain=False, retention_ceiling=timedelta(days=30),
                             consented_families=frozenset(), confirm_capture=False, confirm_admission=False,
                             confirmation_ttl=timedelta(seconds=20))
        self.engine = Engine(self.store, AesGcmCipher(os.urandom(32)), lambda scope: policy, os.urandom(32))

    def call(self, tool: str, arguments: dict[str, Any]) -> Outcome:
        outcome = self.engine.call(tool, caller(), arguments, NOW)
        if outcome.ok:
            errors = list(CONTRACT.validator(CONTRACT.value_schema(tool)).iter_errors(outcome.value))
            assert not errors, errors[0].message
        return outcome

    def admission(self, arguments: dict[str, Any]) -> dict[str, Any]:
        captured = self.call("engram_memory_capture", arguments)
        assert captured.ok, captured.code
        decided = self.call("engram_memory_request_admission", admission_args(captured.value["candidate_id"]))
        assert decided.ok, decided.code
        return decided.value["outcome"]


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[Engines]:
    e = Engines(tmp_path / "store.sqlite3")
    yield e
    e.store.close()


def size(value: Any) -> int:
    return len(canonical_bytes(value, normalize=False))


def sized_capture(total: int, word: str) -> dict[str, Any]:
    """Valid capture arguments of exactly ``total`` canonical bytes, padded with context components."""
    arguments = capture_args(f"Sized record {word}.")
    components = arguments["payload"]["components"]
    while size(arguments) < total:
        pad: dict[str, Any] = {"component_id": f"c-pad-{len(components):02d}", "kind": "context", "text": "x",
                               "citation_ids": ["cit-adr"]}
        components.append(pad)
        missing = total - size(arguments)
        if missing < 0:  # the bare component overshot: shorten an earlier pad instead
            components.pop()
            components[-1]["text"] = components[-1]["text"][:missing]
            break
        pad["text"] += "x" * min(missing, TEXT_MAX - 1)
    assert size(arguments) == total
    return arguments


def test_a_capture_at_the_argument_cap_is_pending_but_never_an_unreadable_record(engines: Engines) -> None:
    """The defect: admitted at the cap, then PROJECTION_OVERSIZED for get at every budget."""
    outcome = engines.admission(sized_capture(ARGUMENTS_MAX, marker()))
    if outcome["status"] == "accepted":
        got = engines.call("engram_memory_get", get_args(outcome["record_id"], max_packet_bytes=BUDGET_MAX))
        assert got.ok, f"an admitted record is unreadable at the largest budget: {got.code}"
    else:
        assert outcome["status"] == "rejected"  # refused at admission, its sealed body destroyed
        row = engines.store._db.execute(
            "SELECT state, ciphertext, wrapped_key FROM candidates WHERE candidate_id = ?", (outcome["candidate_id"],)
        ).fetchone()
        assert (row["state"], row["ciphertext"], row["wrapped_key"]) == ("rejected", None, None)


def test_the_largest_admitted_record_is_served_by_get_and_search_at_the_largest_budget(engines: Engines) -> None:
    """Walk down from the cap to the first capture admitted: it must be readable both ways at max budget."""
    word = marker()
    total = ARGUMENTS_MAX
    while True:
        outcome = engines.admission(sized_capture(total, word))
        if outcome["status"] == "accepted":
            break
        total -= 512
        assert total > ARGUMENTS_MAX - 16_384, "nothing near the cap is ever admitted"
    got = engines.call("engram_memory_get", get_args(outcome["record_id"], max_packet_bytes=BUDGET_MAX))
    assert got.ok, got.code
    assert size(got.value) <= BUDGET_MAX
    found = engines.call("engram_memory_search", search_args(word, max_packet_bytes=BUDGET_MAX))
    assert found.ok, found.code
    assert [e["record"]["record_id"] for e in found.value["records"]] == [outcome["record_id"]]
    assert size(found.value) <= BUDGET_MAX


def pages(engines: Engines, word: str, **options: Any) -> Iterator[Outcome]:
    cursor = None
    while True:
        outcome = engines.call(
            "engram_memory_search", search_args(word, **options, **({"page_cursor": cursor} if cursor else {}))
        )
        yield outcome
        if not outcome.ok:
            return
        assert outcome.value["records"], "never an empty page"
        cursor = outcome.value.get("next_page_cursor")
        if cursor is None:
            return


@pytest.mark.parametrize("limit", [1, 10])
def test_a_record_over_the_default_budget_never_hides_the_other_matches(engines: Engines, limit: int) -> None:
    word = marker()
    small = [engines.admission(capture_args(f"Small record {i} about {word}."))["record_id"] for i in range(3)]
    big = engines.admission(sized_capture(BUDGET_DEFAULT + 8_192, word))
    assert big["status"] == "accepted"
    seen: list[str] = []
    ranks: list[int] = []
    for outcome in pages(engines, word, limit=limit):
        assert outcome.ok, f"a search failed because of one oversized record: {outcome.code}"
        assert size(outcome.value) <= BUDGET_DEFAULT
        seen += [e["record"]["record_id"] for e in outcome.value["records"]]
        ranks += [e["rank"] for e in outcome.value["records"]]
    assert sorted(seen) == sorted(small), (
        "every record that fits the budget is reachable, the oversized one is left out"
    )
    assert len(set(ranks)) == 3 and set(ranks) <= {1, 2, 3, 4}  # the oversized record's rank is skipped
    # The oversized record is still read with a larger budget, by get and by search.
    assert engines.call("engram_memory_get", get_args(big["record_id"])).code == "PROJECTION_OVERSIZED"
    assert engines.call("engram_memory_get", get_args(big["record_id"], max_packet_bytes=BUDGET_MAX)).ok
    wide = engines.call("engram_memory_search", search_args(word, max_packet_bytes=BUDGET_MAX))
    assert sorted(e["record"]["record_id"] for e in wide.value["records"]) == sorted([*small, big["record_id"]])


def test_a_search_whose_only_match_is_oversized_is_still_projection_oversized(engines: Engines) -> None:
    word = marker()
    engines.admission(sized_capture(8_000, word))
    outcome = engines.call("engram_memory_search", search_args(word, max_packet_bytes=4096))
    assert outcome.code == "PROJECTION_OVERSIZED"  # never an empty page, never an empty success


def test_a_page_whose_tail_is_oversized_ends_without_a_dangling_cursor(engines: Engines) -> None:
    """With limit 1 and an oversized record after the last small one, no cursor leads to a failing page."""
    word = marker()
    engines.admission(capture_args(f"Small record about {word}."))
    engines.admission(sized_capture(8_000, word))
    outcomes = list(pages(engines, word, limit=1, max_packet_bytes=4096))
    assert all(o.ok for o in outcomes), [o.code for o in outcomes]
    assert sum(len((o.value or {})["records"]) for o in outcomes) == 1


# -- the readability check's measured overhead ---------------------------------------------------


def built_verdict(engine: Engine, who: Binding, record: dict[str, Any]) -> bool:
    """Readable at the largest budget, judged by building get's value and the worst one-record page in full."""
    recall = engine.recall
    return all(size(value) <= BUDGET_MAX for value in recall._worst_values(who, recall.packet_of(record), NOW))


def padded(record: dict[str, Any], extra: int) -> dict[str, Any]:
    components = [dict(c) for c in record["components"]]
    components[-1]["text"] = components[-1]["text"] + "y" * extra
    return {**record, "components": components}


def test_the_measured_overhead_judges_every_size_as_building_both_answers_would(engines: Engines) -> None:
    """One engine, so each overhead is measured once and then reused: across ids of other lengths and callers
    whose fields differ, the verdict at, below and above the exact boundary is the one the full build gives."""
    admitted = engines.admission(capture_args(f"Boundary record {marker()}."))
    record = engines.call("engram_memory_get", get_args(admitted["record_id"])).value["record"]
    callers = [caller(), Binding(tenant="tenant-with-a-much-longer-name", workspace="w", principal="p" * 40,
                                 agent_id="a", session="s", purpose_ref=PURPOSE + "-longer", issuer="h", audience="a",
                                 issued_at=0, expires_at=0, token_id="j")]
    for id_suffix in ("", "-with-a-longer-id"):
        judged = {**record, "record_id": record["record_id"] + id_suffix}
        for who in callers:
            low, high = 0, BUDGET_MAX  # the largest padding still readable, found by building both answers
            while low < high:
                middle = (low + high + 1) // 2
                readable = built_verdict(engines.engine, who, padded(judged, middle))
                low, high = (middle, high) if readable else (low, middle - 1)
            assert 0 < low < BUDGET_MAX
            for extra in (low - 1, low, low + 1, low + 2):
                record_at = padded(judged, extra)
                assert engines.engine.recall.readable_at_largest_budget(who, record_at, NOW) is built_verdict(
                    engines.engine, who, record_at), f"the verdicts differ at {extra} bytes of padding ({id_suffix!r})"


def test_a_page_filled_by_the_budget_reads_each_ranked_record_once(engines: Engines,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The record that ends a page by size is read once: the look-ahead for the cursor does not read it again."""
    word = marker()
    for i in range(6):
        engines.admission(sized_capture(BUDGET_DEFAULT // 3, f"{word} {i}"))
    reads: list[str] = []
    ranked_record = Recall.ranked_record

    def counted(self: Recall, reader: Any, who: Binding, rid: str) -> Any:
        reads.append(rid)
        return ranked_record(self, reader, who, rid)

    monkeypatch.setattr(Recall, "ranked_record", counted)
    outcome = engines.call("engram_memory_search", search_args(word, limit=10, max_packet_bytes=BUDGET_DEFAULT))
    assert outcome.ok, outcome.code
    served = len(outcome.value["records"])
    assert 1 <= served < 6 and outcome.value.get("next_page_cursor"), "the page is filled by the budget, not the limit"
    assert len(reads) == len(set(reads)) == served + 1, "each record ranked up to the page's end is read once"
