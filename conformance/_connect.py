"""Targets and the wire: one MCP session per era, driven from synchronous checks.

A target is named by one string (a "connectable"): ``stdio:CMD``,
``http://…`` / ``https://…``, or ``reference`` (resolved by the CLI). Each
Connection runs an SDK ClientSession on a background event loop and returns
the raw wire result of every request, so the harness judges what the target
sent — not what a client library made of it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import tempfile
import time
import warnings
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import httpx2
import mcp_types as types
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import TypeAdapter

from engram_mcp.conformance._errors import ConformanceError
from engram_mcp.conformance._host import Answer, Confirmer
from engram_mcp.conformance._tracker import HistoryRecorder, Intent, Sent, Tracker, with_intent
from engram_mcp.conformance._words import answer_words

Era = Literal["legacy", "modern"]
ERAS: tuple[Era, ...] = ("legacy", "modern")
_RAW = TypeAdapter(dict[str, Any])
STALL_AFTER = 3
MAX_LIST_PAGES = 64  # pages of a tools/list followed at most: far more than six tools (and any server's own) need
ReplyKind = Literal["result", "input_required", "error", "timeout", "cancelled"]


class TargetUnreachable(ConformanceError):
    """The target could not be started or did not speak MCP; the message says which, plainly."""


class EraUnsupported(TargetUnreachable):
    """The target answered, but refused the opening request of this protocol era."""


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups, in order; anyio and the SDK wrap failures in groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaf_exceptions(inner)]
    return [exc]


def _first(leaves: list[BaseException], kind: type[BaseException] | tuple[type[BaseException], ...]) -> Any:
    return next((leaf for leaf in leaves if isinstance(leaf, kind)), None)


class _Tap:
    """What crossed the wire by request id, below the SDK session: the id of each tools/call sent, and every
    answer received. The session forgets a request once its caller gives up on it, so a late answer to a
    cancelled call is seen here and nowhere else."""

    KEEP = 64

    def __init__(self) -> None:
        self.last_call_id: Any = None
        self.answers: dict[str, Any] = {}  # the latest KEEP answers, by id

    def sent(self, item: Any) -> None:
        message = getattr(item, "message", None)
        if isinstance(message, types.JSONRPCRequest) and message.method == "tools/call":
            self.last_call_id = message.id

    def received(self, item: Any) -> None:
        message = getattr(item, "message", None)
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError) and message.id is not None:
            self.answers[str(message.id)] = message
            if len(self.answers) > self.KEEP:
                del self.answers[next(iter(self.answers))]


class _Tapped:
    """A session stream that shows each message to the tap and otherwise is the stream it wraps."""

    def __init__(self, inner: Any, tap: _Tap) -> None:
        self._inner, self._tap = inner, tap

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> Any:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)


class _TappedRead(_Tapped):
    def __aiter__(self) -> _TappedRead:
        return self

    async def __anext__(self) -> Any:
        item = await self._inner.__anext__()
        self._tap.received(item)
        return item

    async def receive(self) -> Any:
        item = await self._inner.receive()
        self._tap.received(item)
        return item


class _TappedWrite(_Tapped):
    async def send(self, item: SessionMessage) -> None:
        self._tap.sent(item)
        await self._inner.send(item)


@dataclass(frozen=True)
class Target:
    kind: Literal["stdio", "http"]
    command: tuple[str, ...] = ()
    url: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"stdio:{shlex.join(self.command)}" if self.kind == "stdio" else self.url


def parse_target(
    text: str, *, env: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None
) -> Target:
    """A connectable string as a Target; raises ValueError with a usage message."""
    if text.startswith("stdio:"):
        command = tuple(shlex.split(text[len("stdio:"):]))
        if not command:
            raise ValueError("stdio: needs a command, e.g. stdio:'my-server --flag'")
        return Target("stdio", command=command, env=dict(env or {}))
    if text.startswith(("http://", "https://")):
        return Target("http", url=text, headers=dict(headers or {}))
    raise ValueError("--target takes stdio:CMD, an http(s):// URL, or reference")


@dataclass(frozen=True)
class Reply:
    """One request's outcome as it crossed the wire."""

    kind: ReplyKind
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    elapsed: float = 0.0
    judgement: Any = None  # the contract model's judgement of a tools/call (see _tracker), when the host could give one
    pages: int = 1  # a paginated list (tools/list): how many pages were read into ``result``

    @property
    def envelope(self) -> Any:
        return (self.result or {}).get("structuredContent")

    @property
    def value(self) -> dict[str, Any] | None:
        """The success envelope's output.value, or None when the reply is anything else."""
        envelope = self.envelope
        if self.kind != "result" or not isinstance(envelope, dict) or envelope.get("ok") is not True:
            return None
        output = envelope.get("output")
        value = output.get("value") if isinstance(output, dict) else None
        return value if isinstance(value, dict) else None

    @property
    def code(self) -> Any:
        """The envelope's error code, or the JSON-RPC error code."""
        if self.kind == "error":
            return (self.error or {}).get("code")
        envelope = self.envelope
        return envelope.get("error", {}).get("code") if isinstance(envelope, dict) else None

    def said(self) -> str:
        """What the target answered, in the words a verdict quotes: "the JSON-RPC error -32603 with the message
        '…'", "a refusal envelope with the code NOT_FOUND", "a tool result with isError true and text '…'"."""
        if self.kind in ("error", "result"):
            return answer_words(self.result if self.kind == "result" else None, self.error)
        return {"input_required": "a request for input (input_required)", "timeout": "no answer in time"}.get(
            self.kind, "a cancellation")

    def wire(self) -> dict[str, Any]:
        """The answer as it came over the wire, for evidence: its kind, and the raw result or error (the reports
        bound and redact it)."""
        raw: dict[str, Any] = {"kind": self.kind, "said": self.said()}
        if self.error is not None:
            raw["error"] = self.error
        if self.result is not None:
            raw["result"] = self.result
        return raw


class Connection:
    """One session with the target in one protocol era."""

    def __init__(
        self, target: Target, era: Era, confirmer: Confirmer, *, elicitation: bool = True, timeout: float = 30.0,
        tracker: Tracker | None = None,
    ) -> None:
        self.target, self.era, self.confirmer = target, era, confirmer
        self.tracker = tracker  # the contract model judging every tools/call of the run
        # Set while the session races others: its calls go to a history, not to the run's sequential judgement.
        self.recorder: HistoryRecorder | None = None
        self.client = "session"  # the session's name in a recorded history
        self.elicitation, self.timeout = elicitation, timeout
        self.answer: Answer = "accept"
        self.silence_seconds = 0.0
        self.answer_delay = 0.0  # seconds the host takes to answer an elicitation (deadline checks)
        self.cancel_on_elicit = False  # cancel the in-flight call when the server asks (cancellation checks)
        self._in_flight: anyio.CancelScope | None = None
        self.elicitations = 0
        self.elicitation_requests: list[dict[str, Any]] = []  # what the server asked, for form checks
        self.protocol_noise: list[str] = []
        self.offered: dict[tuple[str, str, str], frozenset[str]] = {}  # tools listed per binding, for World
        self.consecutive_timeouts = 0  # a target that stops answering stalls the era, not the whole run
        self.calls: list[tuple[str, Reply]] = []  # every tools/call and its reply, for run-wide checks
        # Set for a target that confirms by host reference only: adds the host's confirmation to a gated call.
        self.confirm_by_reference: Callable[[str, Any, dict[str, Any], Answer], dict[str, Any]] | None = None
        self.http_status: int | None = None  # the last HTTP error status, which the SDK turns into a JSON-RPC error
        self.lost = False  # the target closed the connection after the opening exchange
        self.tap = _Tap()  # request ids and answers as they crossed the wire (cancellation checks)
        # Lives as long as the connection: the target writes to it until close().
        self.stderr = tempfile.TemporaryFile(  # noqa: SIM115 - open as long as this object, past close()
            mode="w+", encoding="utf-8", errors="replace")
        self._portal_cm: Any = None
        self._portal: BlockingPortal | None = None
        self._session_cm: Any = None
        self._session: ClientSession | None = None

    # -- lifecycle -------------------------------------------------------------

    def open(self) -> dict[str, Any]:
        """Start the session; returns what the handshake said. Raises TargetUnreachable."""
        self._portal_cm = start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        self._session_cm = self._portal.wrap_async_context_manager(self._connect())
        try:
            self._session, handshake = self._session_cm.__enter__()
        except Exception as exc:  # the target's failure to start, described without a traceback
            self._shutdown()
            raise self._diagnose(exc) from None
        return handshake

    @contextlib.asynccontextmanager
    async def _connect(self) -> AsyncIterator[tuple[ClientSession, dict[str, Any]]]:
        callback = self._on_elicit if self.elicitation else None
        async with contextlib.AsyncExitStack() as stack:
            if self.target.kind == "stdio":
                params = StdioServerParameters(command=self.target.command[0], args=list(self.target.command[1:]),
                                               env=dict(self.target.env) or None)
                read, write = await stack.enter_async_context(stdio_client(params, errlog=self.stderr))
            else:
                client = await stack.enter_async_context(
                    httpx2.AsyncClient(
                        headers=dict(self.target.headers),
                        timeout=self.timeout,
                        event_hooks={"response": [self._on_response]},
                    )
                )
                read, write = await stack.enter_async_context(
                    streamable_http_client(self.target.url, http_client=client)
                )
            read, write = _TappedRead(read, self.tap), _TappedWrite(write, self.tap)
            session = await stack.enter_async_context(
                ClientSession(read, write, read_timeout_seconds=self.timeout, elicitation_callback=callback,
                              message_handler=self._on_message)
            )
            with anyio.fail_after(self.timeout):
                if self.era == "legacy":
                    handshake = (await session.initialize()).model_dump(by_alias=True, exclude_none=True)
                else:
                    handshake = (await session.discover()).model_dump(by_alias=True, exclude_none=True)
            yield session, handshake

    def close(self) -> None:
        self._shutdown()

    def _shutdown(self) -> None:
        for cm in (self._session_cm, self._portal_cm):
            if cm is not None:
                with contextlib.suppress(Exception):
                    cm.__exit__(None, None, None)
        self._session_cm = self._portal_cm = None
        self._session = self._portal = None

    def stderr_tail(self, limit: int = 2000) -> str:
        self.stderr.seek(0)
        return self.stderr.read()[-limit:]

    @property
    def opening(self) -> str:
        return "initialize" if self.era == "legacy" else "server/discover"

    def _stderr_note(self) -> str:
        """The last lines the target wrote on stderr, to show beside why it could not be reached."""
        lines = [line.rstrip() for line in self.stderr_tail(4000).splitlines() if line.strip()][-8:]
        text = "\n".join("    " + line[:300] for line in lines)
        return f"\n  the target's stderr ends with:\n{text}" if lines else ""

    def _diagnose(self, exc: BaseException) -> TargetUnreachable:  # noqa: PLR0911 - one return per diagnosis
        """Why the opening exchange failed, in the user's terms: the cause, not the exception's type."""
        leaves = leaf_exceptions(exc)
        status, opening = self.http_status, self.opening
        if status == 401:
            if "authorization" in {k.lower() for k in self.target.headers}:
                return TargetUnreachable("HTTP 401: the target refused the bearer token the profile sends "
                                         "(profile key `http.bearer_token_file`)")
            return TargetUnreachable("HTTP 401: the target wants a bearer token (profile key `http.bearer_token_file`)")
        if status == 403:
            return TargetUnreachable("HTTP 403: the target forbids this client (its bearer token, Host or Origin)")
        if status is not None and status >= 500:
            return TargetUnreachable(f"HTTP {status}: the target failed while answering {opening}")
        refusal = _first(leaves, MCPError)
        if refusal is not None and refusal.error.code == types.CONNECTION_CLOSED:
            return TargetUnreachable(f"the target closed the connection before answering {opening} "
                                     "(its process exited, or closed its output)" + self._stderr_note())
        timed_out = _first(leaves, (TimeoutError, httpx2.TimeoutException)) is not None or (
            refusal is not None and refusal.error.code == types.REQUEST_TIMEOUT)
        if self.protocol_noise:
            return TargetUnreachable("the target wrote text that is not MCP on its protocol channel (stdout)"
                                     + (f" and did not answer {opening} within {self.timeout:g} s" if timed_out else "")
                                     + self._stderr_note())
        if timed_out:
            return TargetUnreachable(f"the target did not answer {opening} within {self.timeout:g} s "
                                     "(--call-timeout sets the wait)" + self._stderr_note())
        if status == 404 and self.era == "legacy":
            return TargetUnreachable(f"HTTP 404: no MCP endpoint at {self.target.url} (is the path right?)")
        if refusal is not None:
            http = f", HTTP {status}" if status else ""
            return EraUnsupported(f"the target refused {opening} (JSON-RPC {refusal.error.code}{http})")
        missing = _first(leaves, (FileNotFoundError, PermissionError))
        if missing is not None:
            why = "no such command" if isinstance(missing, FileNotFoundError) else "permission denied"
            return TargetUnreachable(f"the target command cannot be started: {self.target.command[0]}: {why}")
        unreachable = _first(leaves, httpx2.TransportError)
        if unreachable is not None:
            return TargetUnreachable(
                f"cannot reach {self.target.url}: {str(unreachable)[:200] or type(unreachable).__name__}"
            )
        leaf = leaves[0] if leaves else exc
        return TargetUnreachable(f"the target did not complete the {opening} exchange "
                                 f"({type(leaf).__name__}: {str(leaf)[:200]})" + self._stderr_note())

    def lost_reason(self) -> str:
        """What the user reads once the target has gone: where, and its last words on stderr."""
        return (f"the target closed the connection after the opening exchange in the {self.era} era (its process "
                "exited, or closed its output)" + self._stderr_note())

    async def _on_response(self, response: Any) -> None:
        if response.status_code >= 400:
            self.http_status = response.status_code

    # -- callbacks --------------------------------------------------------------

    async def _on_elicit(self, context: Any, params: Any) -> types.ElicitResult | types.ErrorData:
        self.elicitations += 1
        self.elicitation_requests.append(params.model_dump(by_alias=True, exclude_none=True))
        result = self.confirmer.elicit_result(self.answer)
        if self.cancel_on_elicit and self._in_flight is not None:
            # The caller gives up on the call: the SDK sends notifications/cancelled for it, and the answer
            # below arrives late, after the cancellation.
            self._in_flight.cancel()
        if self.answer_delay:
            await anyio.sleep(self.answer_delay)
        if result is None:
            await anyio.sleep(self.silence_seconds)
            return types.ElicitResult(action="cancel")
        return types.ElicitResult(**result)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.protocol_noise.append(type(message).__name__)

    # -- requests ---------------------------------------------------------------

    def send(self, request: Any, timeout: float | None = None) -> Reply:
        """Any request, as the SDK session frames it; the raw result comes back."""
        return self._send(request, timeout)

    def _send(self, request: Any, timeout: float | None) -> Reply:
        assert self._portal is not None and self._session is not None, "connection is not open"
        session = self._session

        async def send() -> Reply:
            started = time.perf_counter()
            scope = anyio.CancelScope()
            self._in_flight = scope  # the latest request: the one a cancellation check has in flight
            try:
                with scope:
                    # The SDK validates with a TypeAdapter too; only its TypeVar's bound says BaseModel.
                    raw = await session.send_request(  # type: ignore[type-var]  # a TypeAdapter serves as well
                        request, _RAW, request_read_timeout_seconds=timeout or self.timeout)
                if scope.cancelled_caught:
                    return Reply("cancelled", elapsed=time.perf_counter() - started)
            except MCPError as error:
                payload = error.error.model_dump(by_alias=True, exclude_none=True)
                failed: ReplyKind = "timeout" if error.error.code == types.REQUEST_TIMEOUT else "error"
                return Reply(failed, error=payload, elapsed=time.perf_counter() - started)
            finally:
                if self._in_flight is scope:
                    self._in_flight = None
            elapsed = time.perf_counter() - started
            kind: ReplyKind = "input_required" if raw.get("resultType") == "input_required" else "result"
            return Reply(kind, result=raw, elapsed=elapsed)

        with warnings.catch_warnings():
            # The harness sends what no schema allows on purpose; pydantic's serializer notices.
            warnings.filterwarnings("ignore", category=UserWarning, module="pydantic")
            reply = self._portal.call(send)
        self.consecutive_timeouts = self.consecutive_timeouts + 1 if reply.kind == "timeout" else 0
        if reply.kind == "error" and (reply.error or {}).get("message") == "Connection closed" and (
                reply.code == types.CONNECTION_CLOSED):
            # The SDK's own stand-in for a transport that ended (a target may use -32000 for errors of its own).
            self.lost = True
        return reply

    def answer_to(self, request_id: Any, within: float) -> dict[str, Any] | None:
        """The answer the target sent to request ``request_id``, waiting up to ``within`` seconds; None if none came
        (the SDK session drops a late answer to a request its caller gave up on: only the tap sees it)."""
        ends = time.monotonic() + within
        while (answer := self.tap.answers.get(str(request_id))) is None and time.monotonic() < ends:
            time.sleep(0.05)
        return None if answer is None else answer.model_dump(by_alias=True, exclude_none=True)

    @property
    def stalled(self) -> bool:
        """True once the target has let STALL_AFTER calls in a row go unanswered."""
        return self.consecutive_timeouts >= STALL_AFTER

    def list_tools(self, meta: Mapping[str, Any] | None, *, one_page: bool = False) -> Reply:
        """tools/list under ``meta``, every page of it: MCP lets a server page its list (``nextCursor``), so the
        pages are followed, each with the same ``_meta``, and their tools joined into one result. A list that
        does not end within MAX_LIST_PAGES pages, or gives a cursor twice, is answered as what was read, with
        ``nextCursor`` kept, so a check can tell. ``one_page``: the first page alone, as the server sent it."""
        reply = self._list_page(meta, None)
        pages, seen = 1, set()
        while not one_page and reply.kind == "result" and isinstance(reply.result, dict):
            cursor = reply.result.get("nextCursor")
            if not isinstance(cursor, str) or cursor in seen or pages >= MAX_LIST_PAGES:
                break
            seen.add(cursor)
            following = self._list_page(meta, cursor)
            if following.kind != "result" or not isinstance(following.result, dict):
                return following
            tools = [*(reply.result.get("tools") or []), *(following.result.get("tools") or [])]
            reply = Reply("result", result={**following.result, "tools": tools},
                          elapsed=reply.elapsed + following.elapsed)
            pages += 1
        return dataclasses.replace(reply, pages=pages) if pages > 1 else reply

    def _list_page(self, meta: Mapping[str, Any] | None, cursor: str | None) -> Reply:
        fields: dict[str, Any] = {"_meta": dict(meta)} if meta is not None else {}
        if cursor is not None:
            fields["cursor"] = cursor
        params = types.PaginatedRequestParams.model_validate(fields) if fields else None
        return self._send(types.ListToolsRequest(params=params), None)

    def call(self, tool: str, arguments: Any, meta: Mapping[str, Any] | None, *, answer: Answer = "accept",
             input_responses: Mapping[str, Any] | None = None, request_state: str | None = None,
             timeout: float | None = None, as_host: bool = True, intent: Intent | None = None,
             judged: bool = True) -> Reply:
        """tools/call with exactly these arguments; in the legacy era ``answer`` answers any elicitation.
        ``as_host=False`` sends ``meta`` untouched, even to a target that confirms by host reference only.
        ``intent`` tells the run's contract model what the host meant by the call (see _tracker); ``judged=False``
        keeps the call from it: the preflight's probe of whether a tool is served, which decides what the model's
        facts are, and stores nothing."""
        self.answer = answer
        asked_before, started, invoked = self.elicitations, time.time(), time.monotonic()
        if as_host and meta is not None and self.confirm_by_reference is not None:
            meta = self.confirm_by_reference(tool, arguments, dict(meta), answer)
        # model_construct: the harness must be able to send arguments no schema would allow.
        params = types.CallToolRequestParams.model_construct(
            name=tool,
            arguments=arguments,
            input_responses=dict(input_responses) if input_responses is not None else None,
            request_state=request_state,
            meta=dict(meta) if meta is not None else None,
        )
        reply = self._send(types.CallToolRequest.model_construct(method="tools/call", params=params), timeout)
        returned = time.monotonic() if reply.kind not in ("timeout", "cancelled") else None
        if self.tracker is not None and judged:
            asked = (self.elicitations > asked_before or reply.kind == "input_required"
                     or (self.era == "modern" and input_responses is not None))
            sent = Sent(self.era, tool, arguments, meta, answer, input_responses, request_state,
                        self.confirmer.input_responses("accept"), reply.kind, reply.result, reply.error, asked,
                        started, intent, self.elicitation)
            recorder = self.recorder
            if recorder is not None:
                recorder.record(self.client, sent, invoked, returned)
            else:
                reply = with_intent(reply, self.tracker.observe(sent))
        self.calls.append((tool, reply))
        return reply
