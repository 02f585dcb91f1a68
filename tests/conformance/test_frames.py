"""The base protocol's framing rules, judged message by message (conformance/_frames.py), as data."""

from __future__ import annotations

from typing import Any

import pytest

from engram_mcp.conformance._frames import frame_problem, unasked_notifications, unmatched_responses

# (description, message, a word the problem must contain, or None when the message is well formed)
FRAMES: list[tuple[str, Any, str | None]] = [
    ("a request", {"jsonrpc": "2.0", "id": 1, "method": "ping"}, None),
    ("a request with a string id and params", {"jsonrpc": "2.0", "id": "a", "method": "x", "params": {}}, None),
    ("a notification", {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}}, None),
    ("a result", {"jsonrpc": "2.0", "id": 3, "result": {}}, None),
    ("an error", {"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "bad"}}, None),
    ("an error with no id", {"jsonrpc": "2.0", "error": {"code": -32700, "message": "parse"}}, None),
    ("an error with a null id", {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "p"}}, None),
    ("a batch", [{"jsonrpc": "2.0", "id": 1, "result": {}}], "batch"),
    ("another JSON-RPC version", {"jsonrpc": "1.0", "id": 1, "result": {}}, "2.0"),
    ("a request with a null id", {"jsonrpc": "2.0", "id": None, "method": "ping"}, "null"),
    ("a request with a fractional id", {"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, "integer"),
    ("a request with a boolean id", {"jsonrpc": "2.0", "id": True, "method": "ping"}, "integer"),
    ("a method that is no string", {"jsonrpc": "2.0", "id": 1, "method": 7}, "method"),
    ("params that are an array", {"jsonrpc": "2.0", "method": "x", "params": [1]}, "params"),
    ("a request carrying a result", {"jsonrpc": "2.0", "id": 1, "method": "x", "result": {}}, "result"),
    ("a response with both", {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "m"}},
     "both"),
    ("a response with neither", {"jsonrpc": "2.0", "id": 1}, "neither"),
    ("a result with a null id", {"jsonrpc": "2.0", "id": None, "result": {}}, "id"),
    ("a result that is no object", {"jsonrpc": "2.0", "id": 1, "result": [1]}, "object"),
    ("an error without a code", {"jsonrpc": "2.0", "id": 1, "error": {"message": "m"}}, "code"),
    ("an error with a string code", {"jsonrpc": "2.0", "id": 1, "error": {"code": "1", "message": "m"}}, "code"),
    ("an error without a message", {"jsonrpc": "2.0", "id": 1, "error": {"code": 1}}, "message"),
]


@pytest.mark.parametrize(("message", "word"), [(m, w) for _, m, w in FRAMES], ids=[d for d, _, _ in FRAMES])
def test_each_frame_is_judged(message: Any, word: str | None) -> None:
    problem = frame_problem(message)
    if word is None:
        assert problem is None, problem
    else:
        assert problem is not None and word in problem, problem


def test_a_response_answers_a_request_sent_once() -> None:
    sent = {1: "initialize", 2: "tools/list"}
    answered = [{"jsonrpc": "2.0", "id": 1, "result": {}}, {"jsonrpc": "2.0", "id": 2, "result": {}}]
    assert unmatched_responses(answered, sent) == []
    assert unmatched_responses([{"jsonrpc": "2.0", "error": {"code": -32700, "message": "p"}}], sent) == []
    stray = unmatched_responses([{"jsonrpc": "2.0", "id": "1", "result": {}}], sent)  # "1" is not 1
    assert len(stray) == 1 and "never sent" in stray[0]
    twice = unmatched_responses([*answered, {"jsonrpc": "2.0", "id": 2, "error": {"code": 1, "message": "m"}}], sent)
    assert len(twice) == 1 and "second response" in twice[0] and "tools/list" in twice[0]


def test_notifications_name_only_what_was_started() -> None:
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 7, "progress": 1}}
    assert unasked_notifications([progress], [7]) == []
    assert "token 7" in unasked_notifications([progress], ["7"])[0]
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}}
    asked = {"jsonrpc": "2.0", "id": 4, "method": "elicitation/create", "params": {}}
    assert unasked_notifications([asked, cancel], []) == []
    assert "request 4" in unasked_notifications([cancel], [])[0]
    log = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}
    assert unasked_notifications([log], []) == []
