"""The latency statistics behind the NOT_FOUND timing checks."""

from __future__ import annotations

import math
import random

import pytest

from engram_mcp.conformance._timing import GROSS_GAP_MS, compare, mann_whitney_u, verdict


def latencies(rng: random.Random, n: int, shift: float = 0.0) -> list[float]:
    """Reply times in seconds: about 2 ms, right-skewed, as a local server's are."""
    return [0.002 * rng.lognormvariate(0.0, 0.25) + shift for _ in range(n)]


def test_a_small_case_matches_the_normal_approximation_by_hand() -> None:
    # U = 0; mean 4.5; variance 3*3/12*7 = 5.25; z = -(4.5 - 0.5)/sqrt(5.25).
    u, z, p = mann_whitney_u([1, 2, 3], [4, 5, 6])
    assert u == 0
    assert z == pytest.approx(-4 / math.sqrt(5.25))
    assert p == pytest.approx(math.erfc(4 / math.sqrt(5.25) / math.sqrt(2)))
    assert p == pytest.approx(0.0809, abs=1e-4)


def test_u_is_symmetric_and_sums_to_the_product_of_the_sizes() -> None:
    rng = random.Random(7)
    a, b = latencies(rng, 30), latencies(rng, 40)
    u_ab, z_ab, p_ab = mann_whitney_u(a, b)
    u_ba, z_ba, p_ba = mann_whitney_u(b, a)
    assert u_ab + u_ba == pytest.approx(30 * 40)
    assert z_ab == pytest.approx(-z_ba)
    assert p_ab == pytest.approx(p_ba)


def test_ties_are_averaged_and_identical_samples_give_no_evidence() -> None:
    assert mann_whitney_u([1.0] * 10, [1.0] * 12)[2] == 1.0
    # With ties the variance shrinks, so the same separation is more significant than without them.
    tied = mann_whitney_u([1, 1, 1, 2, 2], [2, 3, 3, 3, 3])[2]
    untied = mann_whitney_u([1.0, 1.1, 1.2, 2.0, 2.1], [2.2, 3.0, 3.1, 3.2, 3.3])[2]
    assert tied < 0.05 and untied < 0.05


def test_empty_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        mann_whitney_u([], [1.0])


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_samples_from_one_distribution_are_not_told_apart(seed: int) -> None:
    rng = random.Random(seed)
    result = compare("same", latencies(rng, 80), latencies(rng, 80))
    assert result.p > 0.001
    assert abs(result.gap_ms) < 1.0
    assert result.verdict == "PASS"


def test_a_five_millisecond_shift_is_overwhelming_and_fails() -> None:
    rng = random.Random(11)
    result = compare("shifted", latencies(rng, 80), latencies(rng, 80, shift=0.005))
    assert result.p < 1e-12
    assert result.gap_ms == pytest.approx(5.0, abs=0.5)
    assert result.verdict == "FAIL"


def test_a_small_shift_is_significant_but_only_a_warning() -> None:
    rng = random.Random(12)
    result = compare("slightly", latencies(rng, 100), latencies(rng, 100, shift=0.0008))
    assert result.p < 0.001
    assert abs(result.gap_ms) < GROSS_GAP_MS
    assert result.verdict == "WARN"
    assert set(result.figures()) == {"n", "median_a_ms", "median_b_ms", "gap_ms", "p", "verdict"}
    assert "p=" in result.describe() and "n=100/100" in result.describe()


@pytest.mark.parametrize(("gap_ms", "p", "expected"), [
    (5.0, 1e-9, "FAIL"),
    (-5.0, 1e-9, "FAIL"),       # a faster case gives the target away just as well
    (5.0, 1e-4, "WARN"),        # large but not overwhelming
    (2.9, 1e-12, "WARN"),       # overwhelming but small
    (0.2, 0.0009, "WARN"),
    (0.2, 0.001, "PASS"),
    (10.0, 0.2, "PASS"),        # large but noise
    (0.0, 1.0, "PASS"),
])
def test_the_verdict_maps_figures(gap_ms: float, p: float, expected: str) -> None:
    assert verdict(gap_ms, p) == expected
