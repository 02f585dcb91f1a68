"""The benchmark's queries vary: a measure that repeated one query would time one posting list, not the mix."""

from __future__ import annotations

from tools.bench._queries import queries


def test_the_queries_of_a_measure_are_varied_and_repeatable() -> None:
    drawn = queries(3, 500)
    assert len(drawn) == 500
    assert len(set(drawn)) > 250  # Zipf-weighted words repeat, but most queries differ
    assert {len(query.split()) for query in drawn} == {1, 2, 3}
    assert drawn == queries(3, 500)
    assert drawn != queries(6, 500)
