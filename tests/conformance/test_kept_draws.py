"""Schemathesis draws kept on disk: read back exactly, keyed by all they depend on, never a different case set."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from engram_mcp.conformance._fuzz import kept_draws
from engram_mcp.conformance._fuzz.families import schemathesis as drawing

SCHEMA = {"type": "object"}


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(kept_draws.KEEP_ENV, raising=False)
    return tmp_path / "engram-mcp-conformance" / "drawn"


def test_kept_bodies_read_back_exactly_raw_bytes_and_odd_numbers_included() -> None:
    bodies: tuple[Any, ...] = ({"query": "x", "limit": 3}, b"\xff\x00raw", [1.5, -0.0, 10**30], "text", None,
                               {"nested": [{}]})
    key = kept_draws.draw_key("engram_memory_search", "negative", 0, 25, SCHEMA)
    kept_draws.keep(key, bodies)
    read = kept_draws.read(key)
    assert read is not None and repr(read) == repr(bodies)


def test_bodies_json_would_change_are_not_kept(own_cache: Path) -> None:
    key = kept_draws.draw_key("engram_memory_get", "negative", 0, 25, SCHEMA)
    kept_draws.keep(key, ({"ids": ("a", "b")},))  # a tuple would come back a list
    assert kept_draws.read(key) is None
    assert not list(own_cache.glob("*.jsonl"))


def test_an_unreadable_file_is_a_miss(own_cache: Path) -> None:
    key = kept_draws.draw_key("engram_memory_get", "positive", 0, 25, SCHEMA)
    kept_draws.keep(key, ({"id": "x"},))
    (own_cache / f"{key}.jsonl").write_text('{"json": {"id": "x"}}\n{"json": ', encoding="utf-8")
    assert kept_draws.read(key) is None


def test_fresh_draws_keep_and_read_nothing(monkeypatch: pytest.MonkeyPatch, own_cache: Path) -> None:
    monkeypatch.setenv(kept_draws.KEEP_ENV, "fresh")
    key = kept_draws.draw_key("engram_memory_get", "positive", 0, 25, SCHEMA)
    kept_draws.keep(key, ({"id": "x"},))
    assert kept_draws.read(key) is None
    assert not own_cache.exists() or not list(own_cache.glob("*.jsonl")), "a fresh draw was kept"


def test_the_key_changes_with_every_input_and_with_a_local_module_s_source(tmp_path: Path) -> None:
    base = kept_draws.draw_key("engram_memory_get", "positive", 0, 25, SCHEMA)
    assert base == kept_draws.draw_key("engram_memory_get", "positive", 0, 25, SCHEMA)
    others = {kept_draws.draw_key("engram_memory_search", "positive", 0, 25, SCHEMA),
              kept_draws.draw_key("engram_memory_get", "negative", 0, 25, SCHEMA),
              kept_draws.draw_key("engram_memory_get", "positive", 1, 25, SCHEMA),
              kept_draws.draw_key("engram_memory_get", "positive", 0, 26, SCHEMA),
              kept_draws.draw_key("engram_memory_get", "positive", 0, 25, {"type": "array"})}
    assert base not in others and len(others) == 5
    source = tmp_path / "literals_of_a_local_module.py"
    source.write_text("WORD = 'one'\n", encoding="utf-8")
    module = types.ModuleType("literals_of_a_local_module")
    module.__file__ = str(source)
    sys.modules[module.__name__] = module
    try:
        imported = kept_draws.draw_key("engram_memory_get", "positive", 0, 25, SCHEMA)
        source.write_text("WORD = 'two'\n", encoding="utf-8")  # hypothesis would draw other cases now
        edited = kept_draws.draw_key("engram_memory_get", "positive", 0, 25, SCHEMA)
    finally:
        del sys.modules[module.__name__]
    assert len({base, imported, edited}) == 3


def test_a_second_draw_reads_the_first_back_without_drawing(monkeypatch: pytest.MonkeyPatch) -> None:
    drawing._drawn.cache_clear()
    first = drawing._drawn("engram_memory_get", "negative", 3, 5)
    drawing._drawn.cache_clear()

    def no_drawing(*_: object) -> tuple[object, ...]:
        raise AssertionError("drew again instead of reading the kept draw")

    monkeypatch.setattr(drawing, "_draw", no_drawing)
    try:
        assert repr(drawing._drawn("engram_memory_get", "negative", 3, 5)) == repr(first)
    finally:
        drawing._drawn.cache_clear()


def test_only_the_newest_draws_are_kept(monkeypatch: pytest.MonkeyPatch, own_cache: Path) -> None:
    monkeypatch.setattr(kept_draws, "KEPT_AT_MOST", 3)
    for seed in range(5):
        kept_draws.keep(kept_draws.draw_key("engram_memory_get", "positive", seed, 25, SCHEMA), ({"id": seed},))
    assert len(list(own_cache.glob("*.jsonl"))) == 3
    assert kept_draws.read(kept_draws.draw_key("engram_memory_get", "positive", 4, 25, SCHEMA)) == ({"id": 4},)
