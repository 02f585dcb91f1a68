"""What one JSON-RPC text is: a message to hand to the session, a refusal to send back, or nothing to answer.

The rules, JSON-RPC 2.0 read with MCP's narrower ids (strings and integers, never null):

- text that is not JSON (bad syntax, a number no parser can hold, nesting
  deeper than the parser goes) is a Parse error (-32700) with id null;
- text that is nearly JSON but not I-JSON (a lone surrogate, bytes that are
  not UTF-8, NaN or Infinity) is refused whole as a Parse error too, but with
  the request's id when one can still be read, so that the client's request
  is answered (EMC-ENC-009);
- an object without an "id" member that names a method under "2.0" is a
  notification, and a message carrying "result" or "error" is a response:
  neither is ever answered, however malformed;
- anything else that is not a valid request is an Invalid Request (-32600):
  with its id when the id is a string or an integer, with id null when the id
  is null, fractional, boolean, an object or an array, or when the text is a
  batch (MCP has none) or not an object at all.

The SDK's streamable HTTP transport makes the same split (key presence of
"id" picks a notification, a malformed envelope is -32600, unparsable text is
-32700); this module gives the stdio transport the same answers. The messages
are constants: nothing from the input is ever sent back but a valid id.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import pydantic_core

log = logging.getLogger("engram_mcp.reference")

PARSE_ERROR = types.ErrorData(code=types.PARSE_ERROR, message="Parse error")
INVALID_REQUEST = types.ErrorData(code=types.INVALID_REQUEST, message="Invalid request")
TOO_LARGE = types.ErrorData(code=types.INVALID_REQUEST, message="Message too large")
INTERNAL_ERROR = types.ErrorData(code=types.INTERNAL_ERROR, message="Internal error")

_UNREADABLE = object()


@dataclass(frozen=True)
class Refusal:
    """The error that answers a text, as distinct from a valid error message a client sent."""

    reply: types.JSONRPCError


def refusal(error: types.ErrorData, request_id: types.RequestId | None = None) -> Refusal:
    return Refusal(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def classify(text: bytes) -> types.JSONRPCMessage | Refusal | None:
    """The message in one line of text, the error that answers it, or None when nothing may be answered."""
    try:
        message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValueError:  # pydantic's ValidationError included: the reasons are sorted out below
        return _refusal_for(text)
    # Two things the SDK's model lets through: NaN and Infinity, which are not JSON, and an unusable
    # id (null, 1.5, {}), since the notification model ignores unknown members and would take the
    # request for a notification that nobody answers.
    notification = isinstance(message, types.JSONRPCNotification)
    if notification or b"NaN" in text or b"Infinity" in text:
        value, i_json = _decode(text)
        if not i_json or (notification and "id" in value):
            return _refusal_for(text)
    return message


def _decode(text: bytes) -> tuple[Any, bool]:
    """The JSON value and whether the text is I-JSON; _UNREADABLE when it is not JSON at all."""
    try:
        return pydantic_core.from_json(text, allow_inf_nan=False), True  # bounded depth: too deep is a ValueError
    except ValueError:
        pass
    # Not I-JSON, or not JSON. Python's parser reads lone surrogates, NaN and Infinity, and reads
    # undecodable bytes as U+FFFD, so a request id can still be found. Nesting past its recursion
    # limit is refused with RecursionError, which ends this reading and nothing else.
    try:
        return json.loads(text.decode("utf-8", "replace")), False
    except (ValueError, RecursionError):
        return _UNREADABLE, False


def _usable_id(value: Any) -> types.RequestId | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: it could not be written back
            return None
        return value
    return None


def _refusal_for(text: bytes) -> Refusal | None:
    value, i_json = _decode(text)
    if value is _UNREADABLE:
        return refusal(PARSE_ERROR)
    if not isinstance(value, dict):
        return refusal(INVALID_REQUEST)
    if "method" not in value and ("result" in value or "error" in value):
        log.info("dropped a malformed response")
        return None
    if "id" not in value:
        if value.get("jsonrpc") == "2.0" and isinstance(value.get("method"), str):
            log.info("dropped a malformed notification")
            return None
        return refusal(INVALID_REQUEST if i_json else PARSE_ERROR)
    request_id = _usable_id(value["id"])
    return refusal(INVALID_REQUEST if i_json else PARSE_ERROR, request_id)
