"""Fixtures come from engram_mcp.conformance._plugin. The one hook here runs the run-wide checks last."""

from __future__ import annotations

import pytest

RUN_LAST = "engram_run_last"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{RUN_LAST}: a check that judges every call the run made, so it runs after all others"
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: every other check keeps its place; the run-wide ones follow them.
    items.sort(key=lambda item: item.get_closest_marker(RUN_LAST) is not None)
