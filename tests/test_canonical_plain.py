"""The fast path of the canonical form (the C JSON encoder) gives RFC 8785 bytes, or leaves the value to rfc8785."""

from __future__ import annotations

from typing import Any

import pytest
import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engram_mcp.contract._canonical import (
    _plain,
    _plain_json,
    canonical_array,
    canonical_bytes,
    canonical_object,
    profile_digest,
    profile_digest_and_size,
)

_SAFE = 2**53 - 1
texts = st.text(st.characters(codec=None), max_size=12)  # lone surrogates and non-BMP characters included
scalars = st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.floats(allow_nan=False) | texts
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
                      max_leaves=20)


def _reference(value: Any) -> bytes | type[Exception]:
    try:
        return rfc8785.dumps(value)
    except Exception as error:  # the kind of refusal is what must match
        return type(error)


def _canonical(value: Any) -> bytes | type[Exception]:
    try:
        return canonical_bytes(value, normalize=False)
    except Exception as error:
        return type(error)


@settings(max_examples=800, deadline=None)
@given(values)
def test_the_fast_path_writes_rfc8785_bytes_or_stands_aside(value: Any) -> None:
    fast = _plain_json(value)
    if fast is not None:
        assert fast == _reference(value)
    assert _canonical(value) == _reference(value)


@pytest.mark.parametrize("value", [
    {"\U0001f600": 1, "\uffff": 2},  # UTF-16 order differs from code-point order outside the BMP
    {"n": _SAFE + 1}, {"n": -_SAFE - 1}, {"f": 1.0}, {"f": 0.0}, {"f": -0.0}, {"f": 1e-5}, {"f": 1e16 + 2},
    {"f": 1.5e20}, {"t": (1, 2)}, {"s": "\ud800"}, {"\ud800": 1},
])
def test_values_the_fast_path_leaves_to_the_full_serialiser(value: Any) -> None:
    assert _plain_json(value) is None
    assert _canonical(value) == _reference(value)


@settings(max_examples=3000, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True) | st.floats(1e-5, 1e-3) | st.floats(1e15, 1e17))
def test_a_float_takes_the_fast_path_only_where_its_bytes_are_rfc8785s(number: float) -> None:
    fast = _plain_json([number, {"score": number}])
    if fast is not None:
        assert fast == rfc8785.dumps([number, {"score": number}])
    assert _canonical(number) == _reference(number)


@pytest.mark.parametrize("number", [0.5, -0.25, 0.0001, 123.456, 1234567890123.5, 1 / 3, 2.5e-4])
def test_ordinary_scores_take_the_fast_path(number: float) -> None:
    assert _plain_json({"score": number}) == rfc8785.dumps({"score": number})


def test_escapes_match_rfc8785() -> None:
    value = {"c": "".join(map(chr, range(0x20))) + "\x7f\u2028\u2029\"\\/é\U0001f600", "k": [True, False, None, _SAFE]}
    assert _plain_json(value) == rfc8785.dumps(value)


def _plain_by_recursion(value: Any) -> bool:
    """The rule ``_plain`` implements, stated by recursion: its walk must agree with it on every value."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return -_SAFE <= value <= _SAFE
    if kind is float:
        return 1e-4 <= abs(value) < 1e16 and not value.is_integer()
    if kind is list:
        return all(_plain_by_recursion(item) for item in value)
    if kind is dict:
        return all(type(key) is str and (key.isascii() or max(key) <= "\uffff") and _plain_by_recursion(item)
                   for key, item in value.items())
    return False


odd = st.tuples(st.integers()) | st.sets(st.integers(), max_size=2) | st.binary(max_size=3)
odd_values = st.recursive(scalars | odd, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(texts | st.integers(), inner, max_size=4), max_leaves=20)


@settings(max_examples=1500, deadline=None)
@given(odd_values)
def test_the_walk_agrees_with_the_rule(value: Any) -> None:
    assert _plain(value) == _plain_by_recursion(value)


def test_a_value_that_contains_itself_is_not_plain() -> None:
    looped: list[Any] = [1]
    looped.append(looped)
    assert _plain(looped) is False


@settings(max_examples=600, deadline=None)
@given(st.dictionaries(texts, values, max_size=5), st.sampled_from(["response_digest", "packet_digest", "a", "\u00e9"]))
def test_a_digest_and_its_size_come_from_one_serialisation_exactly(body: dict[str, Any], field: str) -> None:
    try:
        expected_digest = profile_digest("search-response", body)
    except Exception as error:  # what the whole computation refuses, the shortcut refuses too
        with pytest.raises(type(error)):
            profile_digest_and_size("search-response", body, field)
        return
    found, size = profile_digest_and_size("search-response", body, field)
    assert found == expected_digest
    assert size == len(canonical_bytes({**body, field: found}, normalize=False))


REFUSALS = (rfc8785.CanonicalizationError, UnicodeEncodeError)  # RFC 8785's refusals, and a surrogate's
ascii_keys = st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=8)


@settings(max_examples=600, deadline=None)
@given(st.dictionaries(ascii_keys, values, max_size=5), st.lists(values, max_size=4))
@example({"s": [float("inf")]}, [2**53])  # two refusals: which one is met first depends on the order of writing
def test_an_object_joined_from_its_members_bytes_is_its_canonical_form(body: dict[str, Any], items: list[Any]) -> None:
    """What a search page does: its members and its packets serialised apart, then joined."""
    whole = {**body, "records": items}
    try:
        expected = canonical_bytes(whole, normalize=False)
    except REFUSALS:  # what the serialiser refuses (out of its domain, a lone surrogate) is refused joined too
        with pytest.raises(REFUSALS):
            canonical_object({key: canonical_bytes(value, normalize=False) for key, value in whole.items()})
        return
    members = {key: canonical_bytes(value, normalize=False) for key, value in body.items()}
    joined = canonical_object({**members, "records": canonical_array([canonical_bytes(v, normalize=False)
                                                                       for v in items])})
    assert joined == expected
    found, size = profile_digest_and_size("search-response", whole, "response_digest", raw=joined)
    assert (found, size) == profile_digest_and_size("search-response", whole, "response_digest")


def test_joining_refuses_a_key_outside_ascii() -> None:
    with pytest.raises(ValueError, match="ASCII"):
        canonical_object({"\u00e9": b"1"})
