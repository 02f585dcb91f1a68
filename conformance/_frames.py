"""What MCP's base protocol asks of every message a server sends, judged from a watched session's transcript.

Pure functions over what a raw session recorded: the messages the target wrote (parsed JSON values), the
requests the client sent and the progress tokens it gave. Each returns the problems it found as sentences
about the target, so a check can quote them as they are.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from engram_mcp.conformance._words import spoken

# The MCP revision these rules are quoted from (both eras this harness speaks keep them unchanged).
REVISION = "MCP 2025-11-25"


def _is_id(value: Any) -> bool:
    # JSON-RPC allows null and fractions; MCP narrows a request id to a string or an integer.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def frame_problem(message: Any) -> str | None:
    """Why one message the target wrote is no JSON-RPC message as MCP frames them, or None when it is one."""
    if isinstance(message, list):
        return "a JSON-RPC batch, which MCP no longer allows (removed in 2025-06-18): one message a line"
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return 'not a JSON-RPC 2.0 object (no "jsonrpc": "2.0")'
    if "method" in message:
        return _request_problem(message)
    return _response_problem(message)


def _response_problem(message: dict[str, Any]) -> str | None:
    has_result, has_error = "result" in message, "error" in message
    if has_result and has_error:
        return "a response that sets both a result and an error"
    if has_result:
        return _result_problem(message)
    if has_error:
        return _error_problem(message)
    return "neither a request, a notification nor a response (no method, no result, no error)"


def _request_problem(message: dict[str, Any]) -> str | None:
    """A request (with an id) or a notification (without one)."""
    problems = [
        (not isinstance(message["method"], str), "a request or notification whose method is not a string"),
        ("result" in message or "error" in message, "a request or notification that also carries a result or an error"),
        ("params" in message and not isinstance(message["params"], dict), "params that are not an object"),
        ("id" in message and not _is_id(message["id"]),
         "a request whose id is neither a string nor an integer (MCP: the id MUST NOT be null)"),
    ]
    return next((why for broken, why in problems if broken), None)


def _result_problem(message: dict[str, Any]) -> str | None:
    if not _is_id(message.get("id")):
        return "a result whose id is neither a string nor an integer"
    return None if isinstance(message["result"], dict) else "a result that is not an object"


def _error_problem(message: dict[str, Any]) -> str | None:
    # An error may lack an id, or carry null: the refusal of a message the server could not read at all.
    error = message["error"]
    if message.get("id") is not None and not _is_id(message["id"]):
        return "an error whose id is neither a string, an integer nor absent"
    code = error.get("code") if isinstance(error, dict) else None
    if not isinstance(code, int) or isinstance(code, bool):
        return "an error without an integer code"
    return None if isinstance(error.get("message"), str) else "an error without a string message"


def _shown(message: Any) -> str:
    """A message the target sent, as the JSON it was (clipped): what the verdict quotes."""
    try:
        text = json.dumps(message, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = str(message)
    return text if len(text) <= 160 else text[:159] + "…"


def frame_problems(messages: Iterable[Any]) -> list[str]:
    """One line per message that is no well-formed MCP message, naming what is wrong with it."""
    return [f"{problem}: {_shown(m)}" for m in messages if (problem := frame_problem(m)) is not None]


def _responses(messages: Iterable[Any]) -> list[dict[str, Any]]:
    return [m for m in messages if isinstance(m, dict) and frame_problem(m) is None and "method" not in m]


def unmatched_responses(messages: Iterable[Any], sent: Mapping[Any, str]) -> list[str]:
    """Responses that answer no request the client sent, or answer one a second time.

    ``sent`` maps each request id the client used to its method. An error with no id (the refusal of a
    message the server could not read at all) answers nothing in particular and is left out.
    """
    problems: list[str] = []
    seen: Counter[Any] = Counter()
    asked = {(type(i).__name__, i) for i in sent}
    for response in _responses(messages):
        ident = response.get("id")
        if ident is None:
            continue
        key = (type(ident).__name__, ident)  # 1 and "1" are two ids
        seen[key] += 1
        if key not in asked:
            problems.append(f"a response to id {spoken(ident)}, which the client never sent: {_shown(response)}")
        elif seen[key] == 2:
            problems.append(f"a second response to request {spoken(ident)} ({sent[ident]}): {_shown(response)}")
    return problems


def unasked_notifications(messages: Iterable[Any], progress_tokens: Iterable[Any]) -> list[str]:
    """Notifications about something the client never started: progress for a token it did not give, or the
    cancellation of a request the server never sent it."""
    messages = list(messages)
    tokens = {(type(t).__name__, t) for t in progress_tokens}
    asked = {(type(m["id"]).__name__, m["id"]) for m in messages
             if isinstance(m, dict) and isinstance(m.get("method"), str) and _is_id(m.get("id"))}
    problems: list[str] = []
    for m in messages:
        if not isinstance(m, dict) or "id" in m or not isinstance(m.get("method"), str):
            continue
        params: dict[str, Any] = m["params"] if isinstance(m.get("params"), dict) else {}
        if m["method"] == "notifications/progress":
            token = params.get("progressToken")
            if (type(token).__name__, token) not in tokens:
                problems.append(f"progress for token {spoken(token)}, which no request of the client carried: "
                                f"{_shown(m)}")
        elif m["method"] == "notifications/cancelled" and "requestId" in params:
            ident = params["requestId"]
            if (type(ident).__name__, ident) not in asked:
                problems.append(f"the cancellation of request {spoken(ident)}, which the server never sent: "
                                f"{_shown(m)}")
    return problems
