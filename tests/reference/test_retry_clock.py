"""A retried capture keeps the retention of its first capture: the clock judges first executions only (EMC-IDEM-013).

The server's clock is set by the test, so the retry happens after expires_at
without waiting; the call goes through the real MCP handlers in process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engram_mcp.contract import ArgumentOracle
from engram_mcp.reference import _server
from engram_mcp.reference._config import load_config
from engram_mcp.reference._server import ReferenceServer
from tests.reference.conftest import ReferenceDir, capture_args, check_envelope, new_key
from tests.reference.test_core_units import MODES, call_in_process

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def instant(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class Clock(datetime):
    """datetime with a now() the test moves."""

    moment = START

    @classmethod
    def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]  # the moment is a datetime, not a Clock
        return cls.moment


@pytest.fixture(scope="module")
def clock_dir(make_reference_dir: Callable[[], ReferenceDir]) -> ReferenceDir:
    return make_reference_dir()


@pytest.fixture
def reference(clock_dir: ReferenceDir, monkeypatch: pytest.MonkeyPatch) -> Iterator[ReferenceServer]:
    monkeypatch.setattr(_server, "datetime", Clock)
    Clock.moment = START
    server = ReferenceServer(load_config(clock_dir.config))
    yield server
    server.close()


def expiring_soon() -> dict[str, Any]:
    return capture_args(
        retention={"derivative_rule": "make-ineligible", "expires_at": instant(START + timedelta(seconds=1))}
    )


@pytest.mark.anyio
@pytest.mark.parametrize("era", list(MODES))
async def test_a_retry_after_expiry_is_replayed(reference: ReferenceServer, clock_dir: ReferenceDir, era: str) -> None:
    arguments = expiring_soon()
    meta = clock_dir.host.meta()
    first = check_envelope(
        "engram_memory_capture", await call_in_process(reference, era, "engram_memory_capture", arguments, meta)
    )
    assert first["output"]["value"]["status"] == "committed_pending"
    Clock.moment = START + timedelta(seconds=5)
    retry = check_envelope(
        "engram_memory_capture", await call_in_process(reference, era, "engram_memory_capture", arguments, meta)
    )
    assert retry["ok"] is True, retry
    assert retry["output"]["value"]["status"] == "duplicate_exact"
    assert retry["output"]["value"]["candidate_id"] == first["output"]["value"]["candidate_id"]
    fresh = {**arguments, "idempotency_key": new_key("capture")}
    refused = check_envelope(
        "engram_memory_capture", await call_in_process(reference, era, "engram_memory_capture", fresh, meta)
    )
    assert refused["error"]["code"] == "INVALID_SCHEMA"


def test_the_clock_rules_are_judged_apart() -> None:
    oracle = ArgumentOracle()
    arguments = expiring_soon()
    later = START + timedelta(seconds=5)
    assert oracle.verdict("engram_memory_capture", arguments).valid  # no clock: its rules are skipped
    assert not oracle.verdict("engram_memory_capture", arguments, now=later).valid
    assert oracle.clock_verdict("engram_memory_capture", arguments, now=START).valid
    judged = oracle.clock_verdict("engram_memory_capture", arguments, now=later)
    assert (judged.valid, judged.code, [v.rule for v in judged.violations]) == (
        False,
        "INVALID_SCHEMA",
        ["expires_after_capture"],
    )
    # Only the clock's rules: a schema violation is not this verdict's business.
    assert oracle.clock_verdict("engram_memory_capture", {**arguments, "extra": 1}, now=START).valid
