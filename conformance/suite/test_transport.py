"""MCP's own transport rules, which any host relies on before the first tool is called.

The four checks read one transcript per era (``Run.watched``): a fresh session watched from the target's
first byte while it lists its tools, answers one call and exits.
"""

from __future__ import annotations

import pytest

from engram_mcp.conformance._checks import check, not_applicable, require
from engram_mcp.conformance._frames import REVISION, frame_problems, unasked_notifications, unmatched_responses
from engram_mcp.conformance._raw import RawSession
from engram_mcp.conformance._run import Run
from engram_mcp.conformance._words import spoken
from engram_mcp.conformance._world import World

SHOWN = 3  # offending lines quoted in the verdict's detail
# The transcripts are taken in the background once the preflight has passed, beside the checks that come first.
pytestmark = pytest.mark.engram_sessions("watched")


def _transcript(world: World, harness: Run) -> RawSession:
    session = harness.watched(world.era)
    world.evidence.add("transcript", {"messages": len(session.received), "requests": len(session.sent),
                                      "non_mcp_lines": len(session.noise), "unreadable_lines": len(session.unreadable),
                                      "unanswered": session.unanswered})
    return session


def _heard(world: World, session: RawSession) -> None:
    """The transcript was seen whole, or the check cannot pass: a reader that stopped early, or requests left
    unanswered, mean that what the target wrote after them was never judged."""
    assert session.reader_failed is None, (
        f"{session.reader_failed} in the {world.era} era: what the target wrote after that was never judged")
    # Silence proves nothing: the lines it would have written with its answers were never seen.
    require(session.received, f"the target answered nothing over a fresh session in the {world.era} era")
    assert not session.unanswered, (
        f"the target left {spoken(session.unanswered)} of the watched session unanswered in the {world.era} era: "
        "what it would have written with its answers was never judged")


def _quoted(lines: list[str]) -> str:
    more = f"\n  … and {len(lines) - SHOWN} more" if len(lines) > SHOWN else ""
    return "\n".join(f"  {line}" for line in lines[:SHOWN]) + more


@check("transport.stdout-only-mcp", "EMC-HP-073", uses=())
def test_stdout_carries_only_mcp_messages(world: World, harness: Run) -> None:
    """Over stdio the target writes nothing on stdout but JSON-RPC messages, from start to exit (stderr is free)."""
    if harness.target.kind != "stdio":
        not_applicable("the target is not served over stdio")
    session = _transcript(world, harness)
    noise = [f"stdout: {spoken(line[:200])}" for line in session.noise]
    assert not noise, (
        f"the target wrote {len(noise)} line(s) on stdout that are not MCP messages, "
        f"which MCP's stdio transport forbids (log on stderr instead)\n{_quoted(noise)}")
    _heard(world, session)


def _none_sent(world: World, session: RawSession, problems: list[str], what: str, rule: str) -> None:
    """FAIL naming every offending message (the first few quoted), else PASS once the target was heard at all."""
    assert not problems, f"the target sent {len(problems)} {what} ({REVISION}, {rule})\n{_quoted(problems)}"
    _heard(world, session)


@check("transport.jsonrpc-frames", "EMC-HP-074", uses=())
def test_every_message_is_well_formed(world: World, harness: Run) -> None:
    """Every message the target sends is one JSON-RPC request, notification or response as MCP narrows them."""
    session = _transcript(world, harness)
    _none_sent(world, session, [*session.unreadable, *frame_problems(session.received)],
               "message(s) that are not well-formed MCP messages",
               "base protocol: requests carry a string or integer id, never null; a response sets a result or an "
               "error, never both")


@check("transport.responses-answer-requests", "EMC-HP-075", uses=())
def test_every_response_answers_a_request(world: World, harness: Run) -> None:
    """Every response the target sends carries the id of a request the client sent, and answers it once."""
    session = _transcript(world, harness)
    _none_sent(world, session, unmatched_responses(session.received, session.sent),
               "response(s) to no request of the client's",
               "base protocol: a response carries the id of the request it answers")


@check("transport.notifications-asked-for", "EMC-HP-076", uses=())
def test_notifications_refer_to_what_was_asked(world: World, harness: Run) -> None:
    """The target sends progress only for a token the client gave and cancels only requests it sent itself."""
    session = _transcript(world, harness)
    _none_sent(world, session, unasked_notifications(session.received, session.progress_tokens),
               "notification(s) about something the client never started",
               "progress: only for a token a request of the client carried; cancellation: only of a request sent "
               "in the same direction")
