"""Benign variants: clocks. Each server judges host confirmation references, and their execution window, on a clock
just under binding.clock_skew ahead of its host's, or behind it.
"""

from __future__ import annotations

import time

from engram_mcp.reference.server import GateCall, HostReferenceGate
from tests.benign.catalog import CONTRACT, changed_reference_gate, variant
from tests.variant_server import Seams


class _SkewedReferenceClock:
    """Host references judged, and their execution window measured, on a clock ``offset`` seconds off."""

    def __init__(self, inner: HostReferenceGate, offset: float) -> None:
        self.inner, self.offset = inner, offset

    async def approve(self, call: GateCall) -> float | None:
        verdict = self.inner.verdict(call, now=time.time() + self.offset)
        if not verdict.approved or verdict.consume is None or verdict.approved_at is None:
            return None
        if not await call.consume(verdict.consume):
            return None
        return verdict.approved_at - self.offset  # the window, measured on the skewed clock too


def _reference_clock(seams: Seams, offset: float) -> None:
    changed_reference_gate(seams, lambda inner: _SkewedReferenceClock(inner, offset))


CLOCK_OFFSET = CONTRACT.limit("binding.clock_skew") - 1


@variant("reference-clock-ahead", freedom="clocks differ: a server may run up to binding.clock_skew ahead of its host")
def reference_clock_ahead(seams: Seams) -> None:
    """Its clock runs just under the allowed skew ahead of the host's when it judges confirmation references."""
    _reference_clock(seams, CLOCK_OFFSET)


@variant("reference-clock-behind", freedom="clocks differ: a server may run up to binding.clock_skew behind its host")
def reference_clock_behind(seams: Seams) -> None:
    """Its clock runs just under the allowed skew behind the host's when it judges confirmation references."""
    _reference_clock(seams, -CLOCK_OFFSET)
