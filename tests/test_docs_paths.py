"""The architecture guide names files and folders of the tree: each one it names exists, so the guide cannot rot
silently when a module moves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ("docs/architecture.md",)
TOP_LEVEL = ("conformance", "contract", "reference", "schemas", "spec", "tests", "tools", "fixtures", "docs")
# A path: a top-level folder, then a file with an extension or a folder (a trailing slash); `tools/call` and the
# like are MCP method names, not paths.
NAMED_PATH = re.compile(r"`((?:" + "|".join(TOP_LEVEL) + r")/[\w./-]*(?:\.\w+|/))`")


def named_paths(text: str) -> list[str]:
    return sorted(set(NAMED_PATH.findall(text)))


@pytest.mark.parametrize("guide", GUIDES)
def test_every_path_a_guide_names_exists(guide: str) -> None:
    named = named_paths((ROOT / guide).read_text(encoding="utf-8"))
    assert len(named) >= 10, f"{guide} names almost no paths: the pattern no longer reads it"
    missing = [path for path in named if not (ROOT / path).exists()]
    assert not missing, f"{guide} names paths that do not exist: {missing}"


def test_the_pattern_tells_a_path_from_a_method_name() -> None:
    text = "`reference/_call.py` `tests/faulty/` `tools/call` `_explore/` `spec/rules.json` `nowhere/x.py`"
    assert named_paths(text) == ["reference/_call.py", "spec/rules.json", "tests/faulty/"]
