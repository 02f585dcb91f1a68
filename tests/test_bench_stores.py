"""The benchmark's store fingerprint leaves out only modules of the reference's MCP edge."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "reference"


def mcp_edge() -> set[str]:
    out = subprocess.run([sys.executable, "-c", "import json; from tools.bench import _stores; "
                          "print(json.dumps(sorted(_stores.MCP_EDGE)))"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return set(json.loads(out))


def test_the_modules_left_out_of_the_store_fingerprint_exist_and_no_engine_module_imports_them() -> None:
    edge = mcp_edge()
    assert edge and {path.name for path in REFERENCE.glob("*.py")} >= edge
    for path in REFERENCE.glob("*.py"):
        if path.name in edge:
            continue
        source = path.read_text(encoding="utf-8")
        # An engine module importing an edge module would let the edge shape a built store unseen. The engine
        # raises the envelope's Refusal and nothing else of it.
        for name in edge - {"_envelope.py"}:
            module = name.removesuffix(".py")
            assert f".{module} import" not in source and f"import {module}" not in source, (path.name, module)
