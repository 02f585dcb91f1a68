"""The preflight's reading of the eras' handshakes: an era that fails while another answers is that era's
failure only (whichever comes first), and a target no era reaches is named unreachable in every era it failed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from engram_mcp.conformance import _preflight
from engram_mcp.conformance._connect import TargetUnreachable


class _Conn:
    lost = False

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _preflight_of(monkeypatch: pytest.MonkeyPatch, handshakes: dict[str, Any]) -> Any:
    opened = {era: (_Conn(), answer) for era, answer in handshakes.items()}
    monkeypatch.setattr(_preflight, "_open_side_by_side", lambda run: opened)
    monkeypatch.setattr(_preflight, "_unbound_discovery", lambda run: [])
    run = SimpleNamespace(eras=list(handshakes), unsupported_eras={}, connections={}, server_info={},
                          profile=SimpleNamespace(given=False), notes=[], unreachable=None, profile_refused=False)
    _preflight.preflight(run)  # type: ignore[arg-type]  # the fields preflight reads, and no more
    return run


@pytest.mark.parametrize("order", [["legacy", "modern"], ["modern", "legacy"]])
def test_an_era_that_fails_beside_one_that_answers_is_that_eras_failure_whichever_comes_first(
        monkeypatch: pytest.MonkeyPatch, order: list[str]) -> None:
    answers = {"legacy": TargetUnreachable("the target closed the connection"), "modern": {}}
    run = _preflight_of(monkeypatch, {era: answers[era] for era in order})
    assert run.unreachable is None, run.unreachable
    assert list(run.connections) == ["modern"]
    assert "closed the connection" in run.unsupported_eras["legacy"]


def test_a_target_no_era_reaches_is_unreachable_in_each(monkeypatch: pytest.MonkeyPatch) -> None:
    run = _preflight_of(monkeypatch, {"legacy": TargetUnreachable("it exited"),
                                      "modern": TargetUnreachable("it exited")})
    assert run.unreachable == "it exited [legacy and modern eras]"
    assert run.connections == {}
