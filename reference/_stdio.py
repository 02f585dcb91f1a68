"""The stdio transport: newline-delimited JSON-RPC, read in bounded chunks; every line answered or dropped by rule.

Not the SDK's stdio_server, for two reasons. It holds a whole line in memory
whatever its length, and it drops a line it cannot validate without a word,
so a client that sent, say, a lone surrogate waits forever. Here a line
longer than ``max_line_bytes`` is refused as soon as the cap is passed and the
rest of it is skipped unread, and every other line is judged by
``_jsonrpc.classify``. Nothing a client writes can end the process: only the
end of stdin does.

On a pipe or a socket, the event loop itself waits for the descriptor and
reads or writes it, where a wrapped file hands every read, write and flush to
a worker thread: three thread hand-offs per call saved. Anything else (a
regular file, a terminal) is read and written on a worker thread as before.
"""

from __future__ import annotations

import logging
import os
import select
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, BinaryIO

import anyio
import mcp_types as types
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage

from engram_mcp.reference._jsonrpc import INTERNAL_ERROR, TOO_LARGE, Refusal, classify, refusal

log = logging.getLogger("engram_mcp.reference")

CHUNK_BYTES = 64 * 1024
# A write this large to a pipe that polls writable never blocks (POSIX makes it atomic; Linux then has a free
# page). A socket polls writable with room to spare in practice; at worst such a write waits for the reader.
WRITE_AT_ONCE = select.PIPE_BUF if hasattr(select, "PIPE_BUF") else 512


class OverlongLine:
    """Stands for a line that passed the cap: its bytes were not kept."""


OVERLONG = OverlongLine()


async def read_lines(
    read_chunk: Callable[[], Awaitable[bytes]], max_line_bytes: int
) -> AsyncIterator[bytes | OverlongLine]:
    """Each line without its end of line, or OVERLONG the moment a line passes the cap (its rest is then skipped).

    The cap counts the line's bytes without "\n" or "\r\n". At most ``max_line_bytes`` plus one chunk
    is held at any time.
    """
    pending = bytearray()
    skipping = False
    while chunk := await read_chunk():
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            piece = chunk[start:end]
            start = end + 1
            if skipping:
                skipping = False
                continue
            pending += piece
            if len(pending) - pending.endswith(b"\r") > max_line_bytes:
                yield OVERLONG
            else:
                yield bytes(pending)
            pending.clear()
        if not skipping:
            pending += chunk[start:]
            if len(pending) > max_line_bytes + 1:  # one byte of room for a "\r" still to be followed by "\n"
                pending.clear()
                skipping = True
                yield OVERLONG
    if pending and not skipping:  # a last line without an end of line
        yield OVERLONG if len(pending) - pending.endswith(b"\r") > max_line_bytes else bytes(pending)


def _reply_to(line: bytes | OverlongLine) -> SessionMessage | Refusal | None:
    if isinstance(line, OverlongLine):
        return refusal(TOO_LARGE)
    if not line.strip():
        return None
    try:
        judged = classify(line)
    except Exception:  # a fault in the judging itself still answers, and the reader reads on
        log.exception("a line could not be judged")
        return refusal(INTERNAL_ERROR)
    if judged is None or isinstance(judged, Refusal):
        return judged
    return SessionMessage(judged)


def _pollable(stream: BinaryIO) -> int | None:
    """The descriptor of ``stream`` when the event loop can wait on it (a pipe or a socket), else None."""
    if sys.platform == "win32":  # its event loops wait on sockets only
        return None
    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):  # no descriptor: a replaced sys stream
        return None
    return fd if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) else None


def chunk_reader(stream: BinaryIO) -> Callable[[], Awaitable[bytes]]:
    """Reads what has arrived, up to CHUNK_BYTES; b"" at the end of the input."""
    fd = _pollable(stream)
    if fd is None:
        wrapped = anyio.wrap_file(stream)
        return lambda: wrapped.read1(CHUNK_BYTES)

    async def read_chunk() -> bytes:
        while True:
            await anyio.wait_readable(fd)
            try:
                return os.read(fd, CHUNK_BYTES)  # readable: returns what is there without waiting
            except BlockingIOError:  # a descriptor the client made non-blocking, woken for nothing
                continue

    return read_chunk


def bytes_writer(stream: BinaryIO) -> Callable[[bytes], Awaitable[None]]:
    """Writes all of ``data`` before it returns, nothing of it buffered."""
    fd = _pollable(stream)
    if fd is None:

        def write_and_flush(data: bytes) -> None:
            stream.write(data)
            stream.flush()

        async def write_on_a_thread(data: bytes) -> None:
            await anyio.to_thread.run_sync(write_and_flush, data)

        return write_on_a_thread

    async def write_all(data: bytes) -> None:
        view = memoryview(data)
        while view:
            await anyio.wait_writable(fd)
            try:
                view = view[os.write(fd, view[:WRITE_AT_ONCE]):]
            except BlockingIOError:  # as above, on a non-blocking descriptor
                continue

    return write_all


@asynccontextmanager
async def stdio_transport(max_line_bytes: int) -> AsyncIterator[tuple[Any, Any]]:
    read_chunk, write_bytes = chunk_reader(sys.stdin.buffer), bytes_writer(sys.stdout.buffer)
    read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, write_reader = create_context_streams[SessionMessage](0)
    lock = anyio.Lock()

    async def write(message: types.JSONRPCMessage) -> None:
        try:
            data = (message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode("utf-8")
        except Exception:  # an answer that cannot be written still answers its request
            log.exception("a message could not be serialised")
            request_id = getattr(message, "id", None)
            if request_id is None or isinstance(message, types.JSONRPCRequest | types.JSONRPCNotification):
                return
            reply = refusal(INTERNAL_ERROR, request_id).reply
            data = (reply.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode("utf-8")
        async with lock:  # one message's bytes at a time: a long one is written in several pieces
            await write_bytes(data)

    async def reader() -> None:
        async with read_writer:
            async for line in read_lines(read_chunk, max_line_bytes):
                reply = _reply_to(line)
                if isinstance(reply, SessionMessage):
                    await read_writer.send(reply)
                elif reply is not None:
                    await write(reply.reply)

    async def writer() -> None:
        async with write_reader:
            async for session_message in write_reader:
                await write(session_message.message)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(reader)
        tasks.start_soon(writer)
        yield read_stream, write_stream
        tasks.cancel_scope.cancel()
