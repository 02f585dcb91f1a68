"""Every call of the run, judged by the model of contract 1.0.0 (engram_mcp.contract.model).

Checks assert on the answers they set out to provoke. The calls around them — the captures and admissions
that set a situation up, the lookups that follow a refusal — are judged too, as they come back: an answer
there that the contract does not allow is a failure of the requirement it breaks, reported here once the run
is over (the check that made the call may have passed, or stopped as BLOCKED). It is also how the read-only
duty of search and get is held: every later call is judged against a state that a search or a get left as it
was.
"""

from __future__ import annotations

from typing import Any

import pytest

from engram_mcp.conformance._checks import check, require
from engram_mcp.conformance._findings import BROKEN_REQUIREMENTS, MODEL_BLAME_ALONE
from engram_mcp.conformance._world import World

SHOWN = 50


@check("model.every-call", "EMC-SRCH-016", uses=())
@pytest.mark.engram_run_last
def test_every_call_of_the_run_got_an_answer_the_contract_allows(world: World, harness: Any) -> None:
    """No tools/call of the run, in this era, got an answer the contract model does not allow."""
    tracker = harness.tracker
    require(tracker is not None, "the run has no host identity, so the model judged no call")
    judged = sum(tracker.judged.values())
    world.evidence.add("calls_judged", judged)
    world.evidence.add("situations", dict(sorted(tracker.judged.items())))
    require(judged, "the model judged no call of the run")
    wrong = tracker.unclaimed(world.era)
    if wrong:
        world.evidence.add(BROKEN_REQUIREMENTS, sorted({r for v in wrong for r in v.judgement.broken}))
        world.evidence.add(MODEL_BLAME_ALONE, True)  # the calls were other checks': EMC-SRCH-016 is not blamed
        lines = [f"{len(wrong)} call(s) of the {world.era} era got an answer the contract does not allow; first: "
                 f"{wrong[0].judgement.message()}"]
        lines += [f"- {v.judgement.message()}" for v in wrong[:SHOWN]]
        raise AssertionError("\n".join(lines))
