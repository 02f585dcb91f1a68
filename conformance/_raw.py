"""A raw JSON-RPC session, for what an SDK session cannot carry.

The SDK serialises every message through pydantic, which refuses a string
holding a lone surrogate; JSON text can still carry one (``"\\ud800"``), and a
server must refuse it. This session writes JSON text itself, over a stdio
subprocess or plain HTTP POSTs, in either era, and reads the reply back.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from typing import Any

import httpx2
from mcp.client.stdio import get_default_environment
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_NAME_HEADER, NAME_BEARING_METHODS, encode_header_value

from engram_mcp.conformance._connect import Era, Reply, Target
from engram_mcp.conformance._words import quoted

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
_CLIENT = {"name": "engram-conformance-raw", "version": "1"}
_ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": _CLIENT,
}


def _text(message: dict[str, Any]) -> str:
    # ensure_ascii writes a lone surrogate as its \\uXXXX escape: valid JSON text, unencodable UTF-8.
    return json.dumps(message, ensure_ascii=True, separators=(",", ":"))


_NOT_JSONRPC = object()
QUOTED = 120  # characters of an offending line a frame problem quotes


class Unreadable(str):
    """A line the harness's JSON reader could not take in (nested deeper than it goes): why, in words."""


def loads(line: str) -> Any:
    """One line as JSON; ``Unreadable`` (with why) for JSON nested past what the reader takes, which no message of
    the contract's comes near; ValueError for text that is no JSON at all."""
    try:
        return json.loads(line)
    except RecursionError:
        return Unreadable(f"a line nested deeper than the harness's JSON reader goes ({len(line)} characters, "
                          f"beginning {quoted(line, QUOTED)}): no MCP message needs that depth")


def _parsed_jsonrpc(line: str) -> Any:
    """One stdout line as the JSON-RPC 2.0 message (or batch) it holds, ``_NOT_JSONRPC`` when it holds none, or
    ``Unreadable`` when the harness cannot read it."""
    try:
        message = loads(line)
    except ValueError:
        return _NOT_JSONRPC
    if isinstance(message, Unreadable):
        return message
    messages = message if isinstance(message, list) and message else [message]
    return message if all(isinstance(m, dict) and m.get("jsonrpc") == "2.0" for m in messages) else _NOT_JSONRPC


def _is_jsonrpc(line: str) -> bool:
    """Whether one stdout line is a JSON-RPC 2.0 message (or a batch of them), as MCP's stdio transport frames them."""
    return _parsed_jsonrpc(line) is not _NOT_JSONRPC


class RawSession:
    """One raw session with the target in one era; call() sends tools/call with any arguments."""

    def __init__(self, target: Target, era: Era, timeout: float) -> None:
        # A raw request is small: a target that has not answered in 10 s has dropped it. The first exchange
        # of a stdio session also waits for the target to start, so it gets the whole call timeout.
        self.target, self.era, self.timeout = target, era, min(timeout, 10.0)
        self.first_timeout = max(timeout, self.timeout)
        self._heard = False  # the target has written a line: it is up
        self._next_id = 0
        self._process: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str] = queue.Queue()
        self._http: httpx2.Client | None = None
        self._session_id: str | None = None
        self._lock = threading.Lock()  # one exchange at a time: replies are matched by reading in order
        self.silent = False  # set once the target let a raw request go unanswered
        self.calls: list[tuple[str, Reply]] = []  # every tools/call and its reply, for run-wide checks
        # Lines the target wrote on stdout that are no JSON-RPC message: MCP's stdio transport allows none.
        self.noise: list[str] = []
        # What crossed the wire, for the transport checks: every JSON-RPC value the target sent, every request
        # id the client used (with its method) and every progress token it gave.
        self.received: list[Any] = []
        self.sent: dict[int, str] = {}
        self.progress_tokens: list[Any] = []
        # What the harness could not judge: lines it could not read (each with why), requests left unanswered
        # (their methods), and why the reader stopped before the target's end, if it did.
        self.unreadable: list[str] = []
        self.unanswered: list[str] = []
        self.reader_failed: str | None = None
        self._pumping: threading.Thread | None = None

    # -- transport ---------------------------------------------------------------

    def open(self) -> None:
        if self.target.kind == "stdio":
            # As the SDK's own stdio client does: only a safe few variables, never the harness's
            # whole environment (a CI step's secrets, a signing key), plus the ones the target names.
            self._process = subprocess.Popen(
                list(self.target.command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True, encoding="utf-8", errors="replace", env=get_default_environment() | dict(self.target.env),
            )
            self._pumping = threading.Thread(target=self._pump, daemon=True)
            self._pumping.start()
        else:
            self._http = httpx2.Client(headers=dict(self.target.headers), timeout=self.timeout)
        if self.era == "legacy":
            self._request("initialize", {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": _CLIENT})
            self._notify("notifications/initialized")

    def _pump(self) -> None:
        """Read every line the target writes, whatever it holds: a line no check can read is recorded as such, and a
        reader that stops before the target's end says why, so that no check judges a transcript cut short."""
        assert self._process is not None and self._process.stdout is not None
        try:
            for line in self._process.stdout:
                if line.strip():
                    self._take(line)
                self._lines.put(line)
        except Exception as problem:  # the stream itself failed: everything after it is unseen
            self.reader_failed = f"reading the target's stdout failed ({type(problem).__name__})"

    def _take(self, line: str) -> None:
        message = _parsed_jsonrpc(line)  # parsed once: noise for one check, a message for the others
        if isinstance(message, Unreadable):
            self.unreadable.append(str(message))
        elif message is _NOT_JSONRPC:
            self.noise.append(line.rstrip("\r\n"))
        else:
            self.received.append(message)

    def _headers(self, method: str, params: dict[str, Any]) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if self._session_id:
            headers["Mcp-Session-Id"] = self._session_id
        headers["MCP-Protocol-Version"] = MODERN if self.era == "modern" else LEGACY
        if self.era == "modern":
            # The 2026-07-28 streamable HTTP transport routes on these, and refuses a request without them
            # (-32020) before any tool sees it: a raw call must reach the tool like the SDK's own would.
            headers[MCP_METHOD_HEADER] = method
            named = params.get(NAME_BEARING_METHODS.get(method, ""))
            if isinstance(named, str):
                headers[MCP_NAME_HEADER] = encode_header_value(named)
        return headers

    def _post(self, text: str, method: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        assert self._http is not None
        response = self._http.post(self.target.url, content=text.encode("utf-8"), headers=self._headers(method, params))
        self._session_id = response.headers.get("mcp-session-id", self._session_id)
        if "text/event-stream" in response.headers.get("content-type", ""):
            messages = [
                json.loads(line[5:])
                for line in response.text.splitlines()
                if line.startswith("data:") and line[5:].strip()
            ]
        else:
            messages = [response.json()] if response.content else []
        if response.is_success:  # an HTTP error status may carry a body of the server's own, not a message
            self.received.extend(messages)
        return messages

    def _write(self, text: str, method: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        if self._http is not None:
            return self._post(text, method, params)
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(text + "\n")
        self._process.stdin.flush()
        return []

    def _notify(self, method: str) -> None:
        self._write(_text({"jsonrpc": "2.0", "method": method}), method, {})

    def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """Send one request and wait for its answer; one left unanswered is recorded (the transport checks judge a
        session whose requests went unanswered as one they could not see whole)."""
        answer = self._exchange(method, params)
        if answer is None:
            self.unanswered.append(method)
        return answer

    def _exchange(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        self._next_id += 1
        wanted = self._next_id
        self.sent[wanted] = method
        meta = params.get("_meta")
        if isinstance(meta, dict) and "progressToken" in meta:
            self.progress_tokens.append(meta["progressToken"])
        messages = self._write(_text({"jsonrpc": "2.0", "id": wanted, "method": method, "params": params}), method,
                               params)
        deadline = time.monotonic() + (self.timeout if self._heard or self._http is not None else self.first_timeout)
        while True:
            for message in messages:
                if not isinstance(message, dict):
                    continue
                if message.get("id") == wanted and ("result" in message or "error" in message):
                    return message
                if message.get("id") is None and "error" in message:
                    return message  # a refusal of a message the target could not read at all
            if self._http is not None or time.monotonic() >= deadline:
                return None
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            self._heard = True
            try:
                read = loads(line)
            except ValueError:
                read = None
            messages = [] if read is None or isinstance(read, Unreadable) else [read]

    def _late_answer(self, wanted: int) -> dict[str, Any] | None:
        """The answer to request ``wanted`` if it comes within one more timeout; other lines are passed over."""
        deadline = time.monotonic() + self.timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                return None
            try:
                message = loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("id") == wanted and {"result", "error"} & message.keys():
                return message
        return None

    # -- calls ----------------------------------------------------------------------

    def list_tools(self, meta: dict[str, Any]) -> Reply:
        """tools/list, as raw as call(): the transport checks look at every line that comes back."""
        meta = {**_ENVELOPE, **meta} if self.era == "modern" else meta
        with self._lock:
            started = time.perf_counter()
            message = self._request("tools/list", {"_meta": meta} if meta else {})
            elapsed = time.perf_counter() - started
        if message is None:
            return Reply("timeout", elapsed=elapsed)
        return (Reply("error", error=message["error"], elapsed=elapsed) if "error" in message
                else Reply("result", result=message["result"], elapsed=elapsed))

    def call(self, tool: str, arguments: Any, meta: dict[str, Any]) -> Reply:
        if self.era == "modern":
            meta = {**_ENVELOPE, **meta}
        with self._lock:
            if self.silent:  # it dropped one without a word: waiting again would only repeat that
                return Reply("timeout")
            started = time.perf_counter()
            message = self._request("tools/call", {"name": tool, "arguments": arguments, "_meta": meta})
            if message is None and self._http is None:  # once more before calling it silent: on a loaded
                message = self._late_answer(self._next_id)  # machine one slow answer must not fail every later case
            elapsed = time.perf_counter() - started
        if message is None:
            self.silent = True
            return Reply("timeout", elapsed=elapsed)
        reply = (Reply("error", error=message["error"], elapsed=elapsed) if "error" in message
                 else Reply("result", result=message["result"], elapsed=elapsed))
        self.calls.append((tool, reply))
        return reply

    def close(self) -> None:
        if self._process is not None:
            self._process.stdin and self._process.stdin.close()
            try:
                self._process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=3)
            if self._pumping is not None:
                self._pumping.join(timeout=3)  # every line the target wrote before it exited is read
        if self._http is not None:
            self._http.close()
