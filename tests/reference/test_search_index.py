"""The SQLite search index at a size: ranking inside the index, and forget with FTS5 secure-delete.

Search ranks inside the FTS5 index and fetches only a bounded number of matches
(reference/_search.py); these tests hold it to the full sort it replaces, ties and
validity filters included. Forget deletes in place (secure-delete), without
rewriting the index, so a store large enough for a multi-page, multi-segment
index must still hold no byte of a forgotten record's words once the erasure
has been flushed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engram_mcp.reference import _search as search_index
from engram_mcp.reference._ports import Scope, StoreTransaction
from engram_mcp.reference._sqlite_tx import SqliteTransaction
from engram_mcp.reference._store import Store
from tests.reference.conftest import marker
from tests.reference.test_erasure import holders, tail

SCOPE = Scope("tenant-a", "workspace-1")
AS_OF = 1_700_000_000_000
EXPIRY_INSTANT = "2023-11-14T22:13:20.000Z"  # AS_OF as an instant
WORDS = [f"word{chr(97 + i)}" for i in range(8)]  # few words, short texts: many equal scores


def record(number: int, text: str, *, t: int = AS_OF - 1, t_end: int | None = None,
           expires_at: str | None = None) -> dict[str, Any]:
    valid_time: dict[str, Any] = {"t": t, **({"t_end": t_end} if t_end is not None else {})}
    return {
        "record_id": f"mem_{random.Random(number).getrandbits(32):08x}_{number:05d}",  # not in insertion order
        "valid_time": valid_time,
        "payload_digest": f"sha256:{number:064x}",
        "retention": {"derivative_rule": "make-ineligible", **({"expires_at": expires_at} if expires_at else {})},
        "components": [{"component_id": "c-1", "kind": "decision", "text": text, "citation_ids": []}],
        "primary_component_id": "c-1",
        "citations": [],
    }


def full_sort(tx: SqliteTransaction, tokens: list[str], limit: int) -> list[str]:
    """The ranking as the unbounded query gave it: every match joined, filtered, sorted, then cut."""
    table = search_index.fts_table(SCOPE)
    weights = ", ".join(str(w) for w in search_index.FIELD_WEIGHTS)
    rows = tx.sql.execute(
        f"SELECT r.record_id FROM {table} f JOIN records r ON r.rowid = f.rowid "
        f"WHERE {table} MATCH ? AND r.state = 'accepted_current' "
        "AND r.valid_from <= ? AND (r.valid_to IS NULL OR r.valid_to >= ?) "
        "AND (r.expires_at IS NULL OR r.expires_at > ?) "
        f"ORDER BY bm25({table}, {weights}), r.record_id LIMIT ?",
        (search_index.match_expression(tokens), AS_OF, AS_OF, EXPIRY_INSTANT, limit),
    ).fetchall()
    return [row[0] for row in rows]


def admit_all(store: Store, records: list[dict[str, Any]]) -> None:
    def work(tx: StoreTransaction) -> None:
        for r in records:
            tx.admit(SCOPE, f"cand-{r['record_id']}", r, 1)

    store.transaction(work)


def forget(store: Store, record_id: str) -> None:
    def work(tx: StoreTransaction) -> None:
        tx.forget(SCOPE, record_id, "hmac-sha256:" + "0" * 64)

    store.transaction(work)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "store" / "index.sqlite3")
    yield opened
    opened.close()


def test_ranking_inside_the_index_matches_the_full_sort(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(11)
    records = []
    for number in range(600):
        text = " ".join(rng.choices(WORDS, k=rng.randint(1, 4)))
        kind = number % 10
        if kind == 0:
            records.append(record(number, text, t=AS_OF + 1))  # not yet valid
        elif kind == 1:
            records.append(record(number, text, t_end=AS_OF - 1))  # no longer valid
        elif kind == 2:
            records.append(record(number, text, expires_at="2023-01-01T00:00:00.000Z"))  # expired
        else:
            records.append(record(number, text))
    admit_all(store, records)
    forgotten = [r["record_id"] for r in records[3::7]]
    for rid in forgotten:
        forget(store, rid)
    monkeypatch.setattr(search_index, "OVERFETCH", 3)  # cut inside runs of equal scores, and fetch again
    with store.snapshot() as reader:
        assert isinstance(reader, SqliteTransaction)
        for query in (["worda"], ["wordb", "wordc"], WORDS[:3], ["wordh"], ["missing"]):
            for limit in (1, 2, 7, 40, 2000):
                expected = full_sort(reader, query, limit)
                assert reader.search(SCOPE, query, AS_OF, limit) == expected
                assert not set(expected) & set(forgotten)
        assert len(full_sort(reader, WORDS, 2000)) > 300, "the data must give long runs of matches"


def test_forget_leaves_no_word_in_a_large_index(store: Store) -> None:
    rng = random.Random(5)
    vocabulary = [marker() for _ in range(400)]
    words = {number: marker() for number in range(0, 3000, 61)}  # words only the forgotten records hold
    for start in range(0, 3000, 500):  # one segment per transaction: several levels, many leaf pages
        batch = [
            record(n, " ".join([*rng.choices(vocabulary, k=12), *([words[n]] if n in words else [])]))
            for n in range(start, start + 500)
        ]
        admit_all(store, batch)
    needles = {word: tail(word) for word in words.values()}
    assert store.flush_residues()
    assert set(holders(store.path.parent, needles)) == set(needles), "every word is on disk before the forgets"
    for number in words:
        forget(store, record(number, "")["record_id"])
    assert store.flush_residues()
    assert holders(store.path.parent, needles) == {}
    with store.snapshot() as reader:
        assert reader.search(SCOPE, list(words.values()), AS_OF, 10) == []
        assert len(reader.search(SCOPE, vocabulary[:1], AS_OF, 2000)) > 50, "the other records stay searchable"


def test_opening_turns_secure_delete_on_in_an_older_index(tmp_path: Path) -> None:
    path = tmp_path / "store" / "older.sqlite3"
    store = Store(path)
    table = search_index.fts_table(SCOPE)
    admit_all(store, [record(1, "worda")])
    with store.write() as db:
        db.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('secure-delete', 0)")  # as an older server made it
    store.close()
    store = Store(path)
    try:
        with store.read() as db:
            assert db.execute(f"SELECT v FROM {table}_config WHERE k = 'secure-delete'").fetchone()[0] == 1
    finally:
        store.close()


def test_forget_leaves_no_page_directory_prefix_of_a_forgotten_word(store: Store) -> None:
    """Secure-delete empties the leaf pages, but each segment's page directory keeps a prefix of every page's first
    term as written. Numbers sharing long prefixes make those prefixes nearly whole words: when a forgotten word
    starts a page and no live word shares the prefix, the index must be rewritten."""
    rng = random.Random(11)
    numbers = {n: f"4111{rng.getrandbits(40):013d}" for n in range(3000)}
    for start in range(0, 3000, 500):
        admit_all(store, [record(n, f"card {numbers[n]} ledger") for n in range(start, start + 500)])
    table = search_index.fts_table(SCOPE)
    with store.read() as db:
        directory = [bytes(t)[1:].decode() for (t,) in db.execute(f"SELECT term FROM {table}_idx") if len(t) > 1]
    # The records whose number starts a leaf page: the prefix kept for that page is a prefix of their number.
    forgotten = {n for n, word in numbers.items() if any(word.startswith(p) and len(p) >= 6 for p in directory)}
    kept = [word for n, word in numbers.items() if n not in forgotten]
    needles = {p: p.encode() for p in directory
               if len(p) >= 6 and any(numbers[n].startswith(p) for n in forgotten)
               and not any(p in word for word in kept)}  # nor held anywhere in a live word
    assert needles, "no page of this index starts with a forgotten number: the test would prove nothing"
    assert store.flush_residues()
    for n in forgotten:
        forget(store, record(n, "")["record_id"])
    assert store.flush_residues()
    assert holders(store.path.parent, needles) == {}
    with store.snapshot() as reader:
        assert len(reader.search(SCOPE, ["ledger"], AS_OF, 2000)) == min(2000, 3000 - len(forgotten))
