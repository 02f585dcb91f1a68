"""Percentiles, ratios and the round-robin loop that interleaves a measure with its anchor."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def summary_ms(samples: list[float]) -> dict[str, Any]:
    """p50/p99/mean in milliseconds of samples taken in seconds, with their count."""
    return {"p50_ms": statistics.median(samples) * 1000, "p99_ms": percentile(samples, 0.99) * 1000,
            "mean_ms": statistics.fmean(samples) * 1000, "n": len(samples)}


def ratio(value: float, anchor: float) -> float | None:
    return value / anchor if anchor > 0 else None


def timed(step: Callable[[], Any]) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def round_robin(cases: Mapping[str, Callable[[], float]], rounds: int, warmup: int = 5) -> dict[str, list[float]]:
    """Run each case once per round, in turn, so that noise from the shared machine falls on all of them alike.
    A case returns its own elapsed seconds (so it can leave set-up out of the figure)."""
    for _ in range(warmup):
        for case in cases.values():
            case()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            samples[name].append(case())
    return samples
