"""The stdio transport: the SDK's framing, plus an answer to every line that is not a valid message.

The SDK's stdio_server drops a line it cannot validate without a word, so a
client that sent, say, a lone surrogate (legal JSON text, not encodable as
UTF-8) waits forever. Here such a line gets a JSON-RPC error, with its id when
one can be read: every request is answered (EMC-ENC-009).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from io import TextIOWrapper
from typing import Any

import anyio
import mcp_types as types
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage

PARSE_ERROR = types.ErrorData(code=types.PARSE_ERROR, message="Parse error")
INVALID_REQUEST = types.ErrorData(code=types.INVALID_REQUEST, message="Invalid request")


def refusal(line: str) -> types.JSONRPCError | None:
    """The error a line that is not a valid message deserves; None for a notification (nothing to answer)."""
    try:
        message = json.loads(line)
    except ValueError:
        return types.JSONRPCError(jsonrpc="2.0", id=None, error=PARSE_ERROR)
    if not isinstance(message, dict):
        return types.JSONRPCError(jsonrpc="2.0", id=None, error=INVALID_REQUEST)
    request_id: Any = message.get("id")
    if "method" in message and request_id is None:
        return None
    if not isinstance(request_id, int | str) or isinstance(request_id, bool):
        request_id = None
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=PARSE_ERROR)


@asynccontextmanager
async def stdio_transport() -> AsyncIterator[tuple[Any, Any]]:
    stdin = anyio.wrap_file(TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape"))
    stdout = anyio.wrap_file(TextIOWrapper(sys.stdout.buffer, encoding="utf-8"))
    read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, write_reader = create_context_streams[SessionMessage](0)

    async def write(message: Any) -> None:
        await stdout.write(message.model_dump_json(by_alias=True, exclude_unset=True) + "\n")
        await stdout.flush()

    async def reader() -> None:
        async with read_writer:
            async for line in stdin:
                if not line.strip():
                    continue
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception:
                    error = refusal(line)
                    if error is not None:
                        async with lock:
                            await write(error)
                    continue
                await read_writer.send(SessionMessage(message))

    async def writer() -> None:
        async with write_reader:
            async for session_message in write_reader:
                async with lock:
                    await write(session_message.message)

    lock = anyio.Lock()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(reader)
        tasks.start_soon(writer)
        yield read_stream, write_stream
        tasks.cancel_scope.cancel()
