"""Fixtures come from engram_mcp.conformance._plugin. The one hook here orders the run: the checks that wait for a
clock come after the others (their head starts' waits are spent by then, and the background ones then run side by
side without moving a scope under a check that reads it, see _background), and the run-wide checks come last."""

from __future__ import annotations

import pytest

from engram_mcp.conformance._background import on_a_clock

RUN_LAST = "engram_run_last"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{RUN_LAST}: a check that judges every call the run made, so it runs after all others"
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: every other check keeps its place; the ones on a clock follow them, the run-wide ones come last.
    items.sort(key=lambda item: (item.get_closest_marker(RUN_LAST) is not None, _waits_on_a_clock(item)))


def _waits_on_a_clock(item: pytest.Item) -> bool:
    marker = item.get_closest_marker("engram_check")
    return marker is not None and on_a_clock(marker.args[0])
