"""The stdio edge: any line gets the JSON-RPC answer it is owed, or none when JSON-RPC says so, and never ends the
server.

Every test drives a real ``engram-reference serve`` subprocess with raw bytes,
sends the bad input, then a bound ``tools/call`` in the same process, and sees
that call answered: the server is still alive and still in step. One process
serves the whole module, so it also lives through every probe in a row.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from engram_mcp.contract import load
from engram_mcp.reference._config import ConfigError, TransportConfig, load_config
from engram_mcp.reference._stdio import (
    CHUNK_BYTES,
    WRITE_AT_ONCE,
    OverlongLine,
    bytes_writer,
    chunk_reader,
    read_lines,
)
from tests.reference.conftest import (
    CALL_TIMEOUT,
    ENGRAM,
    PURPOSE,
    ReferenceDir,
    init_reference_dir,
    stop,
)

PARSE_ERROR, INVALID_REQUEST = -32700, -32600
ARGUMENTS_MAX_BYTES = load().limit("arguments.max_bytes")
DEFAULT_MAX_MESSAGE_BYTES = 4 * ARGUMENTS_MAX_BYTES


class Wire:
    """The server's stdin and stdout as bytes: what a test writes is exactly what the server reads."""

    def __init__(self, ref: ReferenceDir) -> None:
        self.ref = ref
        with open(ref.path / "server-stderr.log", "ab") as errlog:
            self.process = subprocess.Popen(
                [*ENGRAM, "serve", "--config", str(ref.config)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog,
            )
        self._buffer = b""
        self._next_id = 1000

    def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def line(self, data: bytes) -> None:
        self.write(data + b"\n")

    def send(self, message: Any) -> None:
        self.line(json.dumps(message).encode())

    def next_message(self, timeout: float = CALL_TIMEOUT) -> dict[str, Any]:
        """The next line the server writes, parsed; fails when the server says nothing or exits."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            assert remaining > 0, "no message from the server in time"
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 65536)
                assert chunk, f"the server closed stdout (exit code {self.process.poll()})"
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        reply = self.next_message()
        assert reply.get("id") == self._next_id, f"out of step: expected the reply to {self._next_id}, got {reply}"
        return reply

    def initialize(self) -> None:
        reply = self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                            "clientInfo": {"name": "edge-probe", "version": "1"}})
        assert "result" in reply, reply
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def assert_alive(self) -> None:
        """A bound search is answered with a success envelope: the process lives and reads in step."""
        assert self.process.poll() is None, f"the server exited with {self.process.returncode}"
        reply = self.request("tools/call", {
            "name": "engram_memory_search",
            "arguments": {"query": "anything", "purpose_ref": PURPOSE},
            "_meta": self.ref.host.meta(),
        })
        assert reply["result"]["structuredContent"]["ok"] is True, reply

    def peak_rss_kib(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        stop(self.process)


def set_transport(ref: ReferenceDir, **settings: Any) -> ReferenceDir:
    """Replace server.toml's [transport] table (init writes one with the defaults) by these settings."""
    kept, inside = [], False
    for line in ref.config.read_text(encoding="utf-8").splitlines():
        if line.startswith("["):
            inside = line.strip() == "[transport]"
        if not inside:
            kept.append(line)
    kept += ["[transport]", *(f"{key} = {json.dumps(value)}" for key, value in settings.items())]
    ref.config.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return ref


@pytest.fixture(scope="module")
def edge_dir(tmp_path_factory: pytest.TempPathFactory) -> ReferenceDir:
    return init_reference_dir(tmp_path_factory.mktemp("edge"))


@pytest.fixture(scope="module")
def wire(edge_dir: ReferenceDir) -> Iterator[Wire]:
    """One server for the module: each test leaves it answering in step, or the next one says so."""
    opened = Wire(edge_dir)
    try:
        opened.initialize()
        yield opened
    finally:
        opened.close()


def assert_error(reply: dict[str, Any], code: int, request_id: Any) -> None:
    assert set(reply) == {"jsonrpc", "id", "error"}, reply
    assert reply["jsonrpc"] == "2.0"
    assert reply["id"] == request_id and type(reply["id"]) is type(request_id), reply
    assert reply["error"]["code"] == code, reply
    assert "data" not in reply["error"], "a transport refusal says nothing about the input"


# -- the defect: one deep line ended the process -----------------------------------------


@pytest.mark.parametrize("line", [
    b"[" * 1000,
    b"[" * 100_000,
    b'{"a":' * 50_000,
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":' + b"[" * 100_000,
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":' + b"[" * 5000 + b"]" * 5000 + b"}}",
], ids=["open-1000", "open-100k", "objects-50k", "request-then-open-100k", "request-deep-balanced"])
def test_a_deeply_nested_line_is_answered_and_the_server_lives(wire: Wire, line: bytes) -> None:
    wire.line(line)
    reply = wire.next_message()
    assert reply["id"] in (None, 1) and reply["error"]["code"] in (PARSE_ERROR, INVALID_REQUEST), reply
    wire.assert_alive()


def test_deep_nesting_inside_tool_arguments_is_answered(wire: Wire, edge_dir: ReferenceDir) -> None:
    """Depth the JSON parser accepts still reaches the tool handler: it must answer, not fail or die."""
    for depth in (50, 150, 190):
        wire.send({"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {
            "name": "engram_memory_search", "_meta": edge_dir.host.meta(),
            "arguments": {"query": "x", "purpose_ref": PURPOSE, "deep": json.loads("[" * depth + "]" * depth)},
        }})
        reply = wire.next_message()
        assert reply["id"] == 77
        if "result" in reply:
            assert reply["result"]["structuredContent"]["error"]["code"] == "INVALID_SCHEMA", reply
        else:
            assert reply["error"]["code"] in (PARSE_ERROR, INVALID_REQUEST), reply
    wire.assert_alive()


# -- ids: every request is answered, notifications never ------------------------------------


@pytest.mark.parametrize(
    "raw_id", [b"null", b"{}", b'{"a":1}', b"[1]", b"1.5", b"1.0", b"1e400", b"-0.0", b"true", b"false"]
)
def test_a_request_with_an_invalid_id_gets_invalid_request_with_a_null_id(wire: Wire, raw_id: bytes) -> None:
    """MCP ids are strings or integers; JSON-RPC answers an unusable id with -32600 and id null."""
    wire.line(b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"ping"}')
    assert_error(wire.next_message(), INVALID_REQUEST, None)
    wire.assert_alive()


@pytest.mark.parametrize("request_id", ["a string id", "", 0, -5, 2**53 + 1, 10**30])
def test_a_valid_id_of_any_form_is_echoed(wire: Wire, request_id: Any) -> None:
    wire.send({"jsonrpc": "2.0", "id": request_id, "method": "ping"})
    reply = wire.next_message()
    assert reply["id"] == request_id and "result" in reply, reply
    wire.assert_alive()


@pytest.mark.parametrize("message", [
    {"jsonrpc": "1.0", "id": 7, "method": "ping"},
    {"id": 7, "method": "ping"},
    {"jsonrpc": 2.0, "id": 7, "method": "ping"},
    {"jsonrpc": "2.0", "id": 7, "method": "ping", "params": [1, 2]},
    {"jsonrpc": "2.0", "id": 7, "method": "ping", "params": "text"},
    {"jsonrpc": "2.0", "id": 7, "method": 12},
    {"jsonrpc": "2.0", "id": 7},
], ids=["version-1.0", "no-version", "version-number", "array-params", "string-params", "method-number", "no-method"])
def test_a_malformed_envelope_with_a_readable_id_gets_invalid_request_with_that_id(wire: Wire, message: Any) -> None:
    wire.send(message)
    assert_error(wire.next_message(), INVALID_REQUEST, 7)
    wire.assert_alive()


@pytest.mark.parametrize(
    "line",
    [
        b"[]",
        b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]',
        b"42",
        b'"text"',
        b"null",
        b"{}",
        b'{"jsonrpc":"2.0","method":12}',
        b'{"jsonrpc":"1.0","method":"ping"}',
    ],
)
def test_json_that_is_no_request_gets_invalid_request_with_a_null_id(wire: Wire, line: bytes) -> None:
    """A batch (MCP has none), a scalar, or an object that is neither request nor notification."""
    wire.line(line)
    assert_error(wire.next_message(), INVALID_REQUEST, None)
    wire.assert_alive()


@pytest.mark.parametrize("line", [b"{", b"not json", b'{"jsonrpc":"2.0","id":1,"method":"ping"', b"\x00\x01",
                                  b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}', b'{"id":' + b"9" * 5000 + b"}"])
def test_unparseable_text_gets_parse_error_with_a_null_id(wire: Wire, line: bytes) -> None:
    wire.line(line)
    assert_error(wire.next_message(), PARSE_ERROR, None)
    wire.assert_alive()


@pytest.mark.parametrize("line", [
    b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"q":"\\ud800"}}',
    b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"\\udc00":1}}',
    b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"q":"\xff\xfe"}}',
    b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"q":"\xed\xa0\x80"}}',  # a surrogate encoded as bytes
    b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"q":NaN}}',
    b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"q":-Infinity}}',
], ids=["escaped-lone-high", "escaped-lone-low-key", "invalid-utf8", "utf8-encoded-surrogate", "nan", "infinity"])
def test_text_that_is_not_i_json_gets_parse_error_with_its_id(wire: Wire, line: bytes) -> None:
    """Lone surrogates, bytes that are not UTF-8, NaN: refused whole, answered with the id (EMC-ENC-009)."""
    wire.line(line)
    assert_error(wire.next_message(), PARSE_ERROR, 9)
    wire.assert_alive()


@pytest.mark.parametrize("line", [
    b'{"jsonrpc":"2.0","method":"notifications/whatever"}',
    b'{"jsonrpc":"2.0","method":"notifications/initialized","params":[1]}',
    b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":{"x":1}}}',
    b'{"jsonrpc":"2.0","method":"x","params":{"q":"\\ud800"}}',
    b'{"jsonrpc":"2.0","id":123456,"result":{}}',
    b'{"jsonrpc":"2.0","id":{"x":1},"result":"not an object"}',
    b'{"jsonrpc":"2.0","id":5,"error":"no"}',
    b"",
    b"   \t ",
], ids=["unknown-notification", "notification-array-params", "notification-odd-params", "notification-not-i-json",
        "unsolicited-response", "malformed-response", "malformed-error-response", "empty", "blank"])
def test_notifications_responses_and_blank_lines_get_no_answer(wire: Wire, line: bytes) -> None:
    """JSON-RPC never answers a notification or a response; the next message out is the next request's reply."""
    wire.line(line)
    wire.assert_alive()  # fails "out of step" if anything was written for the line


def test_many_bad_lines_in_one_write_are_each_answered(wire: Wire) -> None:
    """Refusals and the session's replies travel separately, so only the set of answers is fixed, not their order."""
    burst = (
        b"\n".join(
            [
                b"[" * 3000,
                b'{"jsonrpc":"2.0","id":null,"method":"ping"}',
                b'{"jsonrpc":"2.0","id":3,"method":"ping"}',
                b'{"jsonrpc":"2.0","id":4,"method":"ping","params":[]}',
                b"}",
            ]
        )
        + b"\n"
    )
    wire.write(burst)
    replies = [wire.next_message() for _ in range(5)]
    summary = sorted(json.dumps([r["id"], r.get("error", {}).get("code")]) for r in replies)
    assert summary == sorted(json.dumps(x) for x in [[None, PARSE_ERROR], [None, INVALID_REQUEST], [3, None],
                                                     [4, INVALID_REQUEST], [None, PARSE_ERROR]])
    wire.assert_alive()


def test_crlf_line_endings_are_read(wire: Wire) -> None:
    wire.write(b'{"jsonrpc":"2.0","id":"crlf","method":"ping"}\r\n')
    assert wire.next_message() == {"jsonrpc": "2.0", "id": "crlf", "result": {}}
    wire.assert_alive()


# -- the line-length cap --------------------------------------------------------------------


def test_a_line_over_the_cap_is_refused_before_it_ends(wire: Wire) -> None:
    """The refusal comes while the line is still being sent; the rest of it is skipped, the next line is read."""
    wire.write(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * DEFAULT_MAX_MESSAGE_BYTES)
    reply = wire.next_message()  # the line has no end yet
    assert_error(reply, INVALID_REQUEST, None)
    assert reply["error"]["message"] == "Message too large"
    for _ in range(8):
        wire.write(b"y" * (1 << 20))  # more of the same line: skipped, never answered again
    wire.write(b'"}}\n')
    wire.assert_alive()


def test_a_line_exactly_at_the_cap_is_read(wire: Wire) -> None:
    head, tail = b'{"jsonrpc":"2.0","id":"at-cap","method":"ping","params":{"pad":"', b'"}}'
    wire.line(head + b"x" * (DEFAULT_MAX_MESSAGE_BYTES - len(head) - len(tail)) + tail)
    assert wire.next_message() == {"jsonrpc": "2.0", "id": "at-cap", "result": {}}
    wire.line(head + b"x" * (DEFAULT_MAX_MESSAGE_BYTES + 1 - len(head) - len(tail)) + tail)
    assert_error(wire.next_message(), INVALID_REQUEST, None)
    wire.assert_alive()


def test_the_cap_is_configurable(make_reference_dir: Any) -> None:
    cap = 2 * ARGUMENTS_MAX_BYTES
    ref = set_transport(make_reference_dir(), max_message_bytes=cap)
    wire = Wire(ref)
    try:
        wire.initialize()
        wire.line(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * cap + b'"}}')
        assert_error(wire.next_message(), INVALID_REQUEST, None)
        wire.assert_alive()
    finally:
        wire.close()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak RSS from /proc")
def test_a_100_mb_line_does_not_grow_the_server(wire: Wire, capsys: pytest.CaptureFixture[str]) -> None:
    """Memory stays near the cap, not near the line: the peak RSS grows by far less than the line's size."""
    before = wire.peak_rss_kib()
    block = b"z" * (1 << 20)
    wire.write(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"')
    for _ in range(100):
        wire.write(block)
    wire.write(b'"}}\n')
    assert_error(wire.next_message(), INVALID_REQUEST, None)
    wire.assert_alive()
    after = wire.peak_rss_kib()
    with capsys.disabled():
        print(f"\n100 MB line: peak RSS {before / 1024:.1f} MiB before, {after / 1024:.1f} MiB after")
    assert after - before < 32 * 1024, "the server held the over-long line in memory"


# -- the settings --------------------------------------------------------------------------


def test_init_writes_the_transport_defaults(edge_dir: ReferenceDir) -> None:
    written = edge_dir.settings()["transport"]
    assert load_config(edge_dir.config).transport == TransportConfig(**written) == TransportConfig()
    assert written["max_message_bytes"] == DEFAULT_MAX_MESSAGE_BYTES


@pytest.mark.parametrize("settings", [
    {"max_message_bytes": 2 * ARGUMENTS_MAX_BYTES - 1},
    {"max_message_bytes": "4MiB"},
    {"http_header_timeout_seconds": 0},
    {"http_body_timeout_seconds": -1},
    {"http_body_timeout_seconds": True},
    {"http_max_connections": 0},
    {"max_line_bytes": 5_000_000},
])
def test_unusable_transport_settings_are_refused(make_reference_dir: Any, settings: dict[str, Any]) -> None:
    ref = set_transport(make_reference_dir(), **settings)
    with pytest.raises(ConfigError, match="transport"):
        load_config(ref.config)
    done = subprocess.run([*ENGRAM, "serve", "--config", str(ref.config)], capture_output=True, timeout=60)
    assert done.returncode == 2 and b"transport" in done.stderr


# -- line framing, chunk by chunk ------------------------------------------------------------


def framed(chunks: list[bytes], cap: int) -> list[bytes | str]:
    feed = iter([*chunks, b""])

    async def read_chunk() -> bytes:
        return next(feed)

    async def collect() -> list[bytes | str]:
        return [("OVERLONG" if isinstance(line, OverlongLine) else line) async for line in read_lines(read_chunk, cap)]

    return anyio.run(collect)


@pytest.mark.parametrize(("chunks", "expected"), [
    ([b"ab\ncd\n"], [b"ab", b"cd"]),
    ([b"a", b"b", b"\n", b"c"], [b"ab", b"c"]),  # a last line without an end of line is still read
    ([b"abcd\r", b"\nef\r\n"], [b"abcd\r", b"ef\r"]),  # "\r" is left to the JSON parser, which skips it
    ([b"abcde\n"], ["OVERLONG"]),
    ([b"abc", b"de", b"fgh\nok\n"], ["OVERLONG", b"ok"]),  # refused once, the rest skipped up to its end
    ([b"abcdefgh", b"ijk", b"\n", b"ok\n"], ["OVERLONG", b"ok"]),
    ([b"abcd\r\n"], [b"abcd\r"]),  # the cap does not count the end of line
    ([b"abcd\r", b"\n"], [b"abcd\r"]),
    ([b"abcd", b"\r", b"\n"], [b"abcd\r"]),
    ([b"abcde"], ["OVERLONG"]),
    ([b"\n\n"], [b"", b""]),
])
def test_lines_are_framed_across_chunks_with_the_cap(chunks: list[bytes], expected: list[bytes | str]) -> None:
    assert framed(chunks, cap=4) == expected


def test_the_refusal_of_an_overlong_line_comes_before_its_end() -> None:
    """The reader yields the refusal while the line is still open: nothing has been read past the cap."""
    async def first() -> Any:
        async def endless() -> bytes:
            return b"x" * 1000  # a line that never ends

        async for line in read_lines(endless, 4096):
            return line
        return None

    assert isinstance(anyio.run(first), OverlongLine)


# -- the descriptors: a pipe is waited on by the event loop, a file is read and written on a thread ------------


@pytest.mark.parametrize("size", [1, WRITE_AT_ONCE - 1, WRITE_AT_ONCE, 5 * WRITE_AT_ONCE + 7, 3 * CHUNK_BYTES + 1])
@pytest.mark.parametrize("kind", ["pipe", "file"])
def test_the_bytes_written_are_the_bytes_read_on_a_pipe_or_a_file(tmp_path: Path, kind: str, size: int) -> None:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)

    async def through_a_pipe() -> bytes:
        read_fd, write_fd = os.pipe()
        with os.fdopen(read_fd, "rb", buffering=0) as out, os.fdopen(write_fd, "wb") as into:
            read_chunk, write_bytes = chunk_reader(out), bytes_writer(into)
            got = bytearray()

            async def drain() -> None:
                while len(got) < len(data):
                    chunk = await read_chunk()
                    assert chunk, "the pipe ended early"
                    got.extend(chunk)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(drain)  # a reader on the other end: a write longer than the pipe waits for it
                await write_bytes(data)
            return bytes(got)

    async def through_a_file() -> bytes:
        path = tmp_path / "stream"
        with path.open("wb") as into:
            await bytes_writer(into)(data)
        got = bytearray()
        with path.open("rb") as out:
            read_chunk = chunk_reader(out)
            while chunk := await read_chunk():
                got.extend(chunk)
        return bytes(got)

    assert anyio.run(through_a_pipe if kind == "pipe" else through_a_file) == data


def test_a_server_whose_output_is_a_file_answers_in_it(edge_dir: ReferenceDir, tmp_path: Path) -> None:
    """Output redirected to a file, which no event loop can wait on: every answer is still written, in order."""
    out = tmp_path / "answers.jsonl"
    with out.open("wb") as into, open(edge_dir.path / "server-stderr.log", "ab") as errlog:
        process = subprocess.Popen([*ENGRAM, "serve", "--config", str(edge_dir.config)], stdin=subprocess.PIPE,
                                   stdout=into, stderr=errlog)
    try:
        assert process.stdin is not None
        lines: list[dict[str, Any]] = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "file", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "engram_memory_search", "arguments": {"query": "anything", "purpose_ref": PURPOSE},
                "_meta": edge_dir.host.meta()}},
        ]
        asked = 0
        for message in lines:  # one at a time: a request is sent once the one before it is answered
            process.stdin.write(json.dumps(message).encode() + b"\n")
            process.stdin.flush()
            asked += "id" in message
            deadline = time.monotonic() + CALL_TIMEOUT
            while out.read_bytes().count(b"\n") < asked:
                assert time.monotonic() < deadline, "no answer in the file in time"
                assert process.poll() is None, f"the server exited with {process.returncode}"
                time.sleep(0.05)
    finally:
        stop(process)
    answers = [json.loads(line) for line in out.read_bytes().splitlines()]
    assert [answer["id"] for answer in answers] == [1, 2]
    assert answers[1]["result"]["structuredContent"]["ok"] is True, answers[1]
