"""Latency statistics for side-channel checks: Mann–Whitney U and a verdict on the figures.

Two samples of reply latencies are compared with the Mann–Whitney U test
(two-sided, normal approximation with tie correction and continuity
correction), which assumes nothing about the shape of either distribution.
The verdict weighs the significance together with the size of the gap
between the medians: a large and overwhelming difference is a FAIL, a
significant but small one a WARN, anything else a PASS.

Pure standard library, so that the harness needs no numerical package.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Literal

Verdict = Literal["PASS", "WARN", "FAIL"]

# A gap this large (in milliseconds) between medians, established this firmly, is a FAIL.
GROSS_GAP_MS = 3.0
GROSS_P = 1e-6
# Any difference established this firmly, whatever its size, is a WARN.
SUBTLE_P = 1e-3


@dataclass(frozen=True)
class Comparison:
    """Two latency samples compared; times in milliseconds."""

    label: str
    n_a: int
    n_b: int
    median_a_ms: float
    median_b_ms: float
    u: float
    z: float
    p: float

    @property
    def gap_ms(self) -> float:
        """Median of b minus median of a: positive when b is slower."""
        return self.median_b_ms - self.median_a_ms

    @property
    def verdict(self) -> Verdict:
        return verdict(self.gap_ms, self.p)

    def figures(self) -> dict[str, float | int | str]:
        return {
            "n": f"{self.n_a}/{self.n_b}",
            "median_a_ms": round(self.median_a_ms, 3),
            "median_b_ms": round(self.median_b_ms, 3),
            "gap_ms": round(self.gap_ms, 3),
            "p": float(f"{self.p:.3g}"),
            "verdict": self.verdict,
        }

    def describe(self) -> str:
        return (f"{self.label}: medians {self.median_a_ms:.3f} vs {self.median_b_ms:.3f} ms, "
                f"gap {self.gap_ms:+.3f} ms, p={self.p:.3g}, n={self.n_a}/{self.n_b}")


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) of values, and the sizes of the tie groups."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        average = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = average
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """(U of a, z, two-sided p) for the hypothesis that a and b come from one distribution.

    Normal approximation with tie and continuity corrections; adequate from
    about 20 observations per sample, which is what the checks collect.
    """
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples must be non-empty")
    ranks, ties = _ranks([*a, *b])
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    n = n1 + n2
    mean = n1 * n2 / 2
    tie_term = sum(t ** 3 - t for t in ties) / (n * (n - 1)) if n > 1 else 0.0
    variance = n1 * n2 / 12 * ((n + 1) - tie_term)
    if variance <= 0:  # every observation equal: no evidence of any difference
        return u1, 0.0, 1.0
    delta = u1 - mean
    corrected = max(abs(delta) - 0.5, 0.0)
    z = math.copysign(corrected / math.sqrt(variance), delta)
    p = min(1.0, math.erfc(abs(z) / math.sqrt(2)))
    return u1, z, p


def compare(label: str, a: Sequence[float], b: Sequence[float]) -> Comparison:
    """Compare two samples of latencies given in seconds."""
    u, z, p = mann_whitney_u(a, b)
    return Comparison(label=label, n_a=len(a), n_b=len(b), median_a_ms=median(a) * 1000,
                      median_b_ms=median(b) * 1000, u=u, z=z, p=p)


def verdict(gap_ms: float, p: float) -> Verdict:
    """FAIL for a gap above GROSS_GAP_MS with p below GROSS_P; WARN for any p below SUBTLE_P; else PASS."""
    if abs(gap_ms) > GROSS_GAP_MS and p < GROSS_P:
        return "FAIL"
    if p < SUBTLE_P:
        return "WARN"
    return "PASS"
