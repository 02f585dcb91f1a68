"""The mypy plugin that keeps Python spelling out of the harness's sentences finds what it says it finds."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[1]

SAMPLE = '''
from typing import Any

def sentences(code: str | None, codes: list[str], extra: dict[str, int], flag: bool, n: int,
              anything: Any) -> list[str]:
    return [
        f"refused {code}",
        f"codes {codes}",
        f"with {extra}",
        f"flag {flag}",
        f"quoted {n!r}",
        f"{n} calls, {code or 'no code'}, {', '.join(codes)}, {anything}",
    ]
'''


@pytest.mark.parametrize(("package", "reported"), [("engram_mcp/conformance", 5), ("elsewhere", 0)])
def test_the_plugin_reports_each_python_spelling_in_the_harness_and_nothing_elsewhere(
        tmp_path: Path, package: str, reported: int) -> None:
    module = tmp_path / package / "sample.py"
    module.parent.mkdir(parents=True)
    module.write_text(SAMPLE, encoding="utf-8")
    config = tmp_path / "mypy.ini"
    config.write_text(f"[mypy]\nplugins = {ROOT / 'tools' / 'mypy_spelling.py'}\nexplicit_package_bases = True\n"
                      f"mypy_path = {tmp_path}\n",
                      encoding="utf-8")
    out, err, _ = api.run(["--config-file", str(config), "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
                           str(module)])
    found = [line for line in out.splitlines() if "[python-spelling]" in line]
    lines = sorted(int(line.split(":")[1]) for line in found)
    assert len(found) == reported, out + err
    if reported:
        # the Optional code, the list, the dict, the bool, the !r; not the int, the or'ed default, the join or Any
        assert lines == [7, 8, 9, 10, 11], out
