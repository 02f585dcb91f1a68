"""Words for what came over the wire: text cut to fit a line, and a target's own text quoted as data.

Every sentence the model or the harness writes about an answer goes through here, so an answer reads the same
in a verdict, a report and a counterexample, and no Python spelling (``None``, a list, a dict) reaches a reader.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

QUOTED_CHARS = 200  # of a target's own text quoted in a sentence


def clipped(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut between words (never inside one), with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    head = text[:limit - 1]
    cut = head.rsplit(None, 1)[0] if " " in head.strip() else head
    return cut.rstrip(" ,;:") + "…"


def quoted(text: Any, limit: int = QUOTED_CHARS) -> str:
    """A target's text inside a sentence: in single quotes, clipped, its control characters and line breaks shown
    as escapes so that nothing it says starts a line of ours."""
    shown = str(text)
    shown = "".join(ch if ch.isprintable() else json.dumps(ch)[1:-1] for ch in shown)
    return "'" + clipped(shown, limit) + "'"


def spoken(value: Any, limit: int = QUOTED_CHARS) -> str:
    """A value inside a sentence, as a reader reads it: text quoted (``quoted``), true, false and null as JSON
    says them, a list as "a, b and c" (or "none"), an object as "key: value" pairs; never a Python spelling."""
    if isinstance(value, str):
        return quoted(value, limit)
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int | float):
        return json.dumps(value) if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        text = "; ".join(f"{key}: {spoken(item, limit)}" for key, item in value.items()) or "nothing"
        return clipped(text, limit * 2)
    if isinstance(value, list | tuple | set | frozenset):
        items = [spoken(item, limit) for item in (sorted(value, key=str) if isinstance(value, set | frozenset)
                                                  else value)]
        text = "none" if not items else items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
        return clipped(text, limit * 2)
    return quoted(str(value), limit)


def os_reason(problem: OSError) -> str:
    """Why a file could not be read or written, as the system says it (an OSError made by hand may say nothing)."""
    return problem.strerror or "the system gave no reason"


def answer_words(result: Mapping[str, Any] | None, error: Mapping[str, Any] | None) -> str:
    """What a tools/call (or any request) was answered, in plain words: "the JSON-RPC error -32602 'Unknown tool'",
    "a refusal envelope with the code NOT_FOUND", "a tool result with isError true and text '…' and no
    structuredContent"."""
    if error is not None:
        message = error.get("message")
        return f"the JSON-RPC error {spoken(error.get('code'))}" + (
            f" with the message {quoted(message)}" if message is not None else " with no message")
    if result is None:
        return "no answer"
    envelope = result.get("structuredContent")
    if isinstance(envelope, Mapping) and isinstance(envelope.get("ok"), bool):
        if envelope["ok"]:
            return "a success envelope" + _outcome_words(envelope.get("output"))
        failure = envelope.get("error")
        code = failure.get("code") if isinstance(failure, Mapping) else None
        return f"a refusal envelope with the code {spoken(code)}" if code is not None else \
            "a refusal envelope without an error code"
    parts = ["a tool result"]
    if "isError" in result:
        parts.append(f"with isError {spoken(result.get('isError'))}")
    texts = [item.get("text") for item in result.get("content") or [] if isinstance(item, Mapping)
             and item.get("type") == "text" and isinstance(item.get("text"), str)]
    if texts:
        parts.append(f"{'and ' if len(parts) > 1 else 'with '}text {quoted(texts[0])}")
    if "structuredContent" not in result:
        parts.append("and no structuredContent")
    else:
        parts.append(f"and a structuredContent that is no envelope ({_json(envelope, 80)})")
    if not {"content", "structuredContent", "isError"} & set(result):
        return "a result that is no tool result (" + _json(dict(result), 120) + ")"
    return " ".join(parts)


def _outcome_words(output: Any) -> str:
    """What a success envelope's value says of its outcome, when it says something: " with the status accepted",
    " replayed"."""
    value = output.get("value") if isinstance(output, Mapping) else None
    if not isinstance(value, Mapping):
        return ""
    outcome = value.get("outcome")
    status = value.get("status") or (outcome.get("status") if isinstance(outcome, Mapping) else None)
    words = f" with the status {spoken(status)}" if isinstance(status, str) else ""
    return words + (" (a replay)" if value.get("replayed") is True else "")


def _json(value: Any, limit: int) -> str:
    """A whole JSON value a target sent, as JSON text, clipped: what no sentence can say in words."""
    try:
        return clipped(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str), limit)
    except (TypeError, ValueError):
        return clipped(str(value), limit)
