"""Two engines, each on its own PostgresStore (its own pool), one database: two replicas of one server.

They share the configuration's keys, as replicas given one server.toml do. An
idempotency key raced across them has one effect, a confirmation id is burnt
once, a page cursor minted by one is honoured by the other, and the journal and
audit chains verify afterwards. The cursor check is shown failing against a
replica that does not share the cursor key.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from engram_mcp.reference._core import Engine
from engram_mcp.reference._crypto import AesGcmCipher
from engram_mcp.reference._policy import AcceptAll
from engram_mcp.reference._postgres import PostgresStore
from engram_mcp.reference._verify import Findings, chain_problems
from tests.postgres_support import fresh_postgres_url, postgres_url
from tests.reference.conftest import admission_args, capture_args, marker, search_args
from tests.reference.test_core_units import NOW, binding, policy

__all__ = ["fresh_postgres_url", "postgres_url"]  # the fixtures, imported for pytest to find

T = TypeVar("T")
THREADS_PER_REPLICA = 3


@dataclass
class Replicas:
    url: str
    kek: bytes
    cursor_key: bytes
    stores: list[PostgresStore]
    engines: list[Engine]

    def replica(self, cursor_key: bytes | None = None) -> Engine:
        """One more replica on the same database; with another ``cursor_key`` it is misconfigured."""
        store = PostgresStore(self.url)
        self.stores.append(store)
        return Engine(store, AesGcmCipher(self.kek), lambda _: policy(AcceptAll()), cursor_key or self.cursor_key)

    def value(self, engine: Engine, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        outcome = engine.call(tool, binding(), arguments, NOW)
        assert outcome.ok and outcome.value is not None, outcome.code
        return outcome.value


@pytest.fixture
def replicas(fresh_postgres_url: str) -> Iterator[Replicas]:
    group = Replicas(fresh_postgres_url, os.urandom(32), os.urandom(32), [], [])
    group.engines = [group.replica(), group.replica()]
    yield group
    for store in group.stores:
        store.close()


def race(engines: Sequence[Engine], call: Callable[[Engine], T]) -> list[T]:
    """``call`` from several threads per replica at once, lined up by a barrier; every result."""
    results: list[T] = []
    lock = threading.Lock()
    racers = [engine for engine in engines for _ in range(THREADS_PER_REPLICA)]
    barrier = threading.Barrier(len(racers))

    def run(engine: Engine) -> None:
        barrier.wait()
        result = call(engine)
        with lock:
            results.append(result)

    threads = [threading.Thread(target=run, args=(engine,)) for engine in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == len(racers), "a racer did not finish"
    return results


def chains_verify(store: PostgresStore) -> list[str]:
    return chain_problems(store, Findings())


def test_a_capture_raced_across_replicas_has_one_effect(replicas: Replicas) -> None:
    arguments = capture_args()
    results = race(replicas.engines, lambda e: e.call("engram_memory_capture", binding(), arguments, NOW))
    values = [r.value for r in results]
    assert all(v is not None for v in values), [r.code for r in results]
    statuses = sorted(v["status"] for v in values if v is not None)
    assert statuses == ["committed_pending"] + ["duplicate_exact"] * (len(values) - 1)
    assert len({v["candidate_id"] for v in values if v is not None}) == 1
    with replicas.stores[1].snapshot() as reader:
        assert [e.event["operation"] for e in reader.journal()] == ["capture"]
    assert chains_verify(replicas.stores[0]) == []


def test_an_admission_raced_across_replicas_admits_once(replicas: Replicas) -> None:
    candidate = replicas.value(replicas.engines[0], "engram_memory_capture", capture_args())["candidate_id"]
    arguments = admission_args(candidate)
    results = race(replicas.engines, lambda e: e.call("engram_memory_request_admission", binding(), arguments, NOW))
    values = [r.value for r in results if r.value is not None]
    assert len(values) == len(results)
    assert sorted(v["replayed"] for v in values) == [False] + [True] * (len(values) - 1)
    assert len({v["outcome"]["record_id"] for v in values}) == 1
    with replicas.stores[0].snapshot() as reader:
        assert [e.event["operation"] for e in reader.journal()] == ["capture", "accept"]


def test_a_confirmation_id_is_burnt_once_across_replicas(replicas: Replicas) -> None:
    results = race(replicas.engines, lambda e: e.consume_state("state-nonce-1", NOW))
    assert sorted(results) == [False] * (len(results) - 1) + [True]


def paged(replicas: Replicas, word: str) -> tuple[dict[str, Any], dict[str, Any]]:
    for n in range(5):
        candidate = replicas.value(replicas.engines[0], "engram_memory_capture", capture_args(f"{word} item {n}"))
        admission = admission_args(candidate["candidate_id"])
        replicas.value(replicas.engines[0], "engram_memory_request_admission", admission)
    first = replicas.value(replicas.engines[0], "engram_memory_search", search_args(word, limit=2))
    assert "next_page_cursor" in first
    return first, search_args(word, limit=2, page_cursor=first["next_page_cursor"])


def test_a_page_cursor_minted_by_one_replica_is_honoured_by_another(replicas: Replicas) -> None:
    word = marker()
    first, follow = paged(replicas, word)
    second = replicas.value(replicas.engines[1], "engram_memory_search", follow)
    ranks = [r["rank"] for r in first["records"] + second["records"]]
    assert ranks == [1, 2, 3, 4]
    ids = [r["record"]["record_id"] for r in first["records"] + second["records"]]
    assert len(set(ids)) == 4
    assert second["rank_receipt"]["profile"] == PostgresStore.ranking.name


def test_the_cursor_check_catches_a_replica_without_the_shared_cursor_key(replicas: Replicas) -> None:
    word = marker()
    _, follow = paged(replicas, word)
    stranger = replicas.replica(cursor_key=os.urandom(32))
    outcome = stranger.call("engram_memory_search", binding(), follow, NOW)
    assert outcome.code == "STALE_PAGE"
