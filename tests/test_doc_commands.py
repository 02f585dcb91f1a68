"""Every command the guides show runs as shown: docs/implementers.md and spec/profile.md, block by block.

Each ```sh block runs in one scratch folder per guide, in the guide's order (a later block uses what an earlier
one made, as a reader's terminal would), with ``.venv`` standing for this test's own environment. A block ends
with exit code 0 unless the guide says otherwise in an HTML comment just above it (``<!-- exit 5 -->``: the
exit code the guide tells the reader to expect). The README's blocks are run by tests/test_project.py and
tests/test_thirdparty.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ("docs/implementers.md", "spec/profile.md")
BLOCK = re.compile(r"(?:<!-- exit (?P<exit>\d+) -->\n)?```sh\n(?P<code>.*?)\n```", re.S)


def blocks(guide: str) -> list[tuple[int, str]]:
    """(expected exit code, shell code) of each sh block of a guide, in order."""
    text = (ROOT / guide).read_text(encoding="utf-8")
    return [(int(found["exit"] or 0), found["code"]) for found in BLOCK.finditer(text)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("guide", GUIDES)
def test_every_block_of_the_guide_runs_as_shown(guide: str, tmp_path: Path) -> None:
    shown = blocks(guide)
    assert shown, f"{guide} shows no command any more: the pattern no longer reads it"
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent, target_is_directory=True)
    for number, (expected, code) in enumerate(shown, 1):
        done = subprocess.run(["bash", "-eo", "pipefail", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)
        said = done.stdout[-3000:] + done.stderr[-3000:]
        assert done.returncode == expected, f"{guide}, block {number} exited {done.returncode}, not {expected}:\n" \
            f"{code}\n---\n{said}"
        assert "Traceback" not in said, f"{guide}, block {number}:\n{said}"


def test_the_pattern_reads_an_expected_exit_code() -> None:
    text = "<!-- exit 5 -->\n```sh\nfalse\n```\n\n```sh\ntrue\n```"
    assert [(int(m["exit"] or 0), m["code"]) for m in BLOCK.finditer(text)] == [(5, "false"), (0, "true")]
