"""The benchmark's queries vary: a measure that repeated one query would time one posting list, not the mix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DRAW = ("import json; from tools.bench._queries import queries; "
        "print(json.dumps([queries(3, 500), queries(3, 500), queries(6, 500)]))")


def test_the_queries_of_a_measure_are_varied_and_repeatable() -> None:
    # tools/ is not a package of the install: it is imported from the repository root, as the bench runs.
    out = subprocess.run([sys.executable, "-c", DRAW], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    drawn, again, other = json.loads(out)
    assert len(drawn) == 500
    assert len(set(drawn)) > 250  # Zipf-weighted words repeat, but most queries differ
    assert {len(query.split()) for query in drawn} == {1, 2, 3}
    assert drawn == again
    assert drawn != other
