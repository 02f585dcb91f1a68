"""Fixtures for the reference server's tests: configurations, a test host, payloads and MCP clients.

Every end-to-end test drives a real ``engram-reference serve`` process, over
stdio or streamable HTTP, in the legacy era (``initialize``) or the modern era
(2026-07-28), acting as the host: it mints signed bindings with the key that
``engram-reference init`` wrote, and answers confirmations as a human would,
or refuses to, as each test steers it.

Results are read with a raw ``send_request`` so that the SDK client never
validates them on its own; ``McpClient`` checks every envelope it sees against
the contract instead (§2: structuredContent, text copy, isError, the advertised
output schema, the fixed messages, unique auditIds).
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2
import jwt
import mcp_types as types
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from mcp import ClientSession, StdioServerParameters
from mcp import stdio_client as open_stdio
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

from engram_mcp.contract import load
from engram_mcp.contract.binding import (
    BINDING_TOKEN_TYPE,
    CONFIRMATION_INPUT_KEY,
    HOST_BINDING_META_KEY,
    Binding,
    load_private_key,
    mint_binding,
)

CONTRACT = load()
TOOLS = tuple(CONTRACT.tools)
PURPOSE = "purpose:conformance"
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
CALL_TIMEOUT = 20.0  # seconds for one request; a missing reply is a failure, never a hang
START_TIMEOUT = 30.0
# The installed command line, next to this interpreter; ``python -m`` where no script was installed.
_SCRIPT = Path(sys.executable).parent / "engram-reference"
ENGRAM = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "engram_mcp.reference._cli"]
UNTRUSTED = CONTRACT.protocol_errors["trusted_context_unavailable"]
UNKNOWN_TOOL = CONTRACT.protocol_errors["unknown_tool"]
AUDIT_ID = re.compile(r"^[\x21-\x7e]+$")  # the host's, printable ASCII (EMC-HP-053)
ERAS = ("legacy", "modern")

_RESULT = TypeAdapter(types.CallToolResult | types.InputRequiredResult)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


# -- configurations ------------------------------------------------------------


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))  # a TOML basic string is a JSON string for these values


@dataclass
class ReferenceDir:
    """An ``engram-reference init`` directory, and the host that its keys let a test act as."""

    path: Path
    host: Host

    @property
    def config(self) -> Path:
        return self.path / "server.toml"

    @property
    def store(self) -> Path:
        return self.path / "store" / "engram.sqlite3"

    @property
    def bearer(self) -> str:
        return (self.path / "keys" / "http-bearer.txt").read_text(encoding="utf-8").strip()

    def settings(self) -> dict[str, Any]:
        return tomllib.loads(self.config.read_text(encoding="utf-8"))

    def edit(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Rewrite server.toml after ``change`` mutated its parsed form (the layout init writes)."""
        data = self.settings()
        change(data)
        lines = []
        if "server" in data:
            lines += ["[server]", *(f"{k} = {_toml(v)}" for k, v in data["server"].items()), ""]
        if "confirmation" in data:
            lines += ["[confirmation]", *(f"{k} = {_toml(v)}" for k, v in data["confirmation"].items()), ""]
        if "store" in data:
            lines += ["[store]", *(f"{k} = {_toml(v)}" for k, v in data["store"].items()), ""]
        bare = {kid: entry for kid, entry in data.get("host_keys", {}).items() if not isinstance(entry, dict)}
        if bare:  # the older layout, which a configuration no longer accepts
            lines += ["[host_keys]", *(f"{json.dumps(kid)} = {_toml(v)}" for kid, v in bare.items()), ""]
        for kid, entry in data.get("host_keys", {}).items():
            if kid not in bare:
                lines += [f"[host_keys.{json.dumps(kid)}]", *(f"{k} = {_toml(v)}" for k, v in entry.items()), ""]
        for scope in data.get("scopes", []):
            lines += ["", "[[scopes]]"]
            lines += [f"{k} = {_toml(v)}" for k, v in scope.items() if k != "principals"]
            if "principals" in scope:
                lines += ["", "[scopes.principals]"]
                lines += [f"{json.dumps(p)} = {_toml(t)}" for p, t in scope["principals"].items()]
        self.config.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def edit_scope(self, tenant: str, workspace: str, **settings: Any) -> None:
        def change(data: dict[str, Any]) -> None:
            for scope in data["scopes"]:
                if (scope["tenant"], scope["workspace"]) == (tenant, workspace):
                    scope.update(settings)
                    return
            raise KeyError((tenant, workspace))

        self.edit(change)

    def grant(self, principal: str, tools: list[str], scopes: list[tuple[str, str]]) -> None:
        def change(data: dict[str, Any]) -> None:
            for scope in data["scopes"]:
                if (scope["tenant"], scope["workspace"]) in scopes:
                    scope["principals"][principal] = tools

        self.edit(change)


def init_reference_dir(path: Path) -> ReferenceDir:
    """Run the real ``engram-reference init`` and load the host key it wrote."""
    done = subprocess.run([*ENGRAM, "init", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    profile = tomllib.loads((path / "conformance-profile.toml").read_text(encoding="utf-8"))
    key = load_private_key((path / profile["binding"]["private_key_file"]).read_bytes())
    host = Host(key=key, kid=profile["binding"]["kid"], audience=profile["target"]["audience"],
                issuer=profile["binding"]["issuer"])
    return ReferenceDir(path=path, host=host)


@pytest.fixture(scope="module")
def reference_dir(tmp_path_factory: pytest.TempPathFactory) -> ReferenceDir:
    """A fresh configuration and store, one per test module."""
    return init_reference_dir(tmp_path_factory.mktemp("engram"))


@pytest.fixture(scope="module")
def make_reference_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[], ReferenceDir]:
    """More private configurations, for tests that edit server.toml."""
    return lambda: init_reference_dir(tmp_path_factory.mktemp("engram"))


# -- the test host -------------------------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


FORGERIES = (
    "expired",
    "not_yet_valid",
    "too_long_lived",
    "wrong_audience",
    "untrusted_key",
    "bad_signature",
    "alg_none",
    "extra_header",
    "extra_claim",
    "missing_claim",
    "garbage",
    "empty",
)  # a null binding cannot be sent through the SDK client (it drops None from _meta): see test_core_units


@dataclass
class Host:
    """Mints host bindings as spec/host-wiring.md §1 pins them, and forges bad ones."""

    key: Ed25519PrivateKey
    kid: str
    audience: str
    issuer: str

    def token(
        self,
        tenant: str = "acme",
        workspace: str = "research",
        principal: str = "agent-full",
        purpose: str = PURPOSE,
        *,
        agent_id: str = "agent-1",
        session: str = "session-1",
        key: Ed25519PrivateKey | None = None,
        kid: str | None = None,
        audience: str | None = None,
        **overrides: Any,
    ) -> str:
        return mint_binding(
            key or self.key, kid or self.kid, audience=audience or self.audience, issuer=self.issuer,
            tenant=tenant, workspace=workspace, principal=principal, agent_id=agent_id, session=session,
            purpose_ref=purpose, **overrides,
        )

    def meta(
        self, tenant: str = "acme", workspace: str = "research", principal: str = "agent-full", **kw: Any
    ) -> dict[str, Any]:
        return {HOST_BINDING_META_KEY: self.token(tenant, workspace, principal, **kw)}

    def binding(self, tenant: str = "acme", workspace: str = "research", principal: str = "agent-full",
                session: str = "session-1") -> Binding:
        """The Binding the server derives from ``meta(...)`` (ids do not depend on the token's own fields)."""
        return Binding(
            tenant, workspace, principal, "agent-1", session, PURPOSE, self.issuer, self.audience, 0, 0, "jti"
        )

    def forged(self, kind: str, **kw: Any) -> dict[str, Any]:  # noqa: PLR0912 - one branch per forgery
        """A ``_meta`` whose binding the server must refuse (Appendix A of the host wiring)."""
        now = time.time()
        if kind == "expired":
            token = self.token(now=now - 600, lifetime=60, **kw)
        elif kind == "not_yet_valid":
            token = self.token(now=now + 600, lifetime=60, **kw)
        elif kind == "too_long_lived":
            token = self.token(lifetime=CONTRACT.limit("binding.max_lifetime") + 60, **kw)
        elif kind == "wrong_audience":
            token = self.token(audience="engram-reference-somewhere-else", **kw)
        elif kind == "untrusted_key":
            token = self.token(key=Ed25519PrivateKey.generate(), kid="host-nobody-trusts", **kw)
        elif kind == "bad_signature":
            token = self.token(key=Ed25519PrivateKey.generate(), **kw)
        elif kind == "alg_none":
            header = _b64url(json.dumps({"alg": "none", "typ": BINDING_TOKEN_TYPE, "kid": self.kid}).encode())
            claims = self.token(**kw).split(".")[1]
            token = f"{header}.{claims}."
        elif kind == "extra_header":
            token = self.token(header={"jku": "https://attacker.invalid/keys"}, **kw)
        elif kind == "extra_claim":
            token = self.token(scope="acme/research", **kw)
        elif kind == "missing_claim":
            token = self.token(jti=None, **kw)
        elif kind == "garbage":
            token = "not-a-jws"
        elif kind == "empty":
            token = ""
        else:
            raise ValueError(kind)
        return {HOST_BINDING_META_KEY: token}


# -- arguments -----------------------------------------------------------------


def new_key(label: str = "op") -> str:
    """A fresh idempotency key: ASCII, well over the 16-byte minimum."""
    return f"key-{label}-{uuid.uuid4().hex}"


def marker() -> str:
    """A word no other test writes; lowercase letters and digits, so the FTS index keeps it whole."""
    return "zq" + secrets.token_hex(8)


def capture_args(
    text: str | None = None,
    *,
    key: str | None = None,
    purpose: str = PURPOSE,
    retention: dict[str, Any] | None = None,
    families: list[str] | None = None,
    context: str | None = None,
    valid_from: int = 1_700_000_000_000,
) -> dict[str, Any]:
    """Valid engram_memory_capture arguments: one cited decision, optionally a context component."""
    components = [{"component_id": "c-decision", "kind": "decision",
                   "text": text if text is not None else f"We chose SQLite for the embedded store {marker()}.",
                   "citation_ids": ["cit-adr"]}]
    if context is not None:
        components.append(
            {"component_id": "c-context", "kind": "context", "text": context, "citation_ids": ["cit-adr"]}
        )
    payload: dict[str, Any] = {
        "schema_version": 2,
        "purpose_ref": purpose,
        "valid_time": {"t": valid_from},
        "components": components,
        "primary_component_id": "c-decision",
        "primary_event": {"at": valid_from, "type_ref": "event:decided", "citation_id": "cit-adr"},
        "citations": [{"citation_id": "cit-adr", "source_ref": "source:adr-7",
                       "locator": {"scheme": "document", "value": "adr-7#decision"}, "content_digest": DIGEST_A}],
    }
    if retention is not None:
        payload["retention"] = retention
    if families is not None:
        payload["reconciliation"] = {"family_refs": families}
    return {
        "idempotency_key": key or new_key("capture"),
        "payload": payload,
        "evidence": {"evidence_ref": "evidence:review", "evidence_digest": DIGEST_B, "citation_ids": ["cit-adr"]},
    }


def search_args(query: str, **extra: Any) -> dict[str, Any]:
    return {"query": query, "purpose_ref": PURPOSE, **extra}


def get_args(record_id: str, **extra: Any) -> dict[str, Any]:
    return {"record_id": record_id, "purpose_ref": PURPOSE, **extra}


def admission_args(candidate_id: str, key: str | None = None) -> dict[str, Any]:
    return {"candidate_id": candidate_id, "idempotency_key": key or new_key("admit")}


def withdraw_args(candidate_id: str, key: str | None = None, reason: str = "reason:superseded") -> dict[str, Any]:
    return {"candidate_id": candidate_id, "idempotency_key": key or new_key("withdraw"), "reason_ref": reason}


def forget_args(record_id: str, key: str | None = None, reason: str = "reason:erasure-request") -> dict[str, Any]:
    return {"record_id": record_id, "idempotency_key": key or new_key("forget"), "reason_ref": reason}


# -- confirmations ---------------------------------------------------------------


@dataclass
class Confirmer:
    """The human behind the host: answers each confirmation as the test says, and remembers being asked."""

    mode: str = "accept"
    delay: float = 0.0
    asked: list[dict[str, Any]] = field(default_factory=list)

    def reset(self) -> None:
        self.mode, self.delay = "accept", 0.0
        self.asked.clear()

    def answer(self) -> dict[str, Any]:
        """The answer as wire JSON (an ElicitResult, or an error reply)."""
        answers: dict[str, dict[str, Any]] = {
            "accept": {"action": "accept", "content": {"confirm": True}},
            "decline": {"action": "decline"},
            "cancel": {"action": "cancel"},
            "accept_false": {"action": "accept", "content": {"confirm": False}},
            "accept_extra": {"action": "accept", "content": {"confirm": True, "scope": "all"}},
            "accept_empty": {"action": "accept"},
            "accept_string": {"action": "accept", "content": {"confirm": "true"}},
            "error": {"error": True},
        }
        return answers[self.mode]

    async def elicitation_callback(
        self, context: Any, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        self.asked.append(params.model_dump(by_alias=True, exclude_none=True))
        if self.delay:
            await anyio.sleep(self.delay)
        answer = self.answer()
        if "error" in answer:
            return types.ErrorData(code=types.INTERNAL_ERROR, message="the host could not show the form")
        return types.ElicitResult(**answer)

    def input_responses(self) -> dict[str, Any]:
        answer = self.answer()
        if "error" in answer:
            return {}
        return {CONFIRMATION_INPUT_KEY: answer}


# -- results ---------------------------------------------------------------------


@dataclass
class Result:
    """A tools/call result that carried an envelope."""

    tool: str
    raw: types.CallToolResult

    @property
    def env(self) -> dict[str, Any]:
        return self.raw.structured_content

    @property
    def ok(self) -> bool:
        return self.env["ok"]

    @property
    def value(self) -> dict[str, Any]:
        assert self.ok, f"expected success, got {self.env.get('error')}"
        return self.env["output"]["value"]

    @property
    def code(self) -> str | None:
        return None if self.ok else self.env["error"]["code"]

    def without_audit_id(self) -> dict[str, Any]:
        return {k: v for k, v in self.env.items() if k != "auditId"}


def check_envelope(tool: str, raw: types.CallToolResult) -> dict[str, Any]:
    """§2 envelope rules that hold for every result of every tool (EMC-ENV-001..006, EMC-ERR-001..003)."""
    env = raw.structured_content
    assert isinstance(env, dict), "the envelope travels as structuredContent"
    texts = [c for c in raw.content if c.type == "text"]
    assert len(texts) == 1, "one JSON text copy of the envelope"
    assert json.loads(texts[0].text) == env, "the text copy parses to structuredContent"
    assert raw.is_error is (not env["ok"]), "isError is the negation of ok"
    errors = sorted(CONTRACT.output_validator(tool).iter_errors(env), key=str)
    assert not errors, f"{tool} envelope breaks the advertised outputSchema: {errors[0].message}"
    assert env["redactionClass"] == "high"
    assert CONTRACT.limit("audit_id.min_chars") <= len(env["auditId"]) <= CONTRACT.limit("audit_id.max_chars")
    assert AUDIT_ID.match(env["auditId"])
    if env["ok"]:
        assert set(env) == {"ok", "output", "auditId", "redactionClass"}
        assert env["output"]["schema_version"] == 1
    else:
        assert set(env) == {"ok", "auditId", "redactionClass", "error"}
        spec = CONTRACT.errors[env["error"]["code"]]
        assert env["error"] == {"code": spec.code, "message": spec.message, "retriable": spec.retriable}
        assert tool in spec.tools, f"{tool} may not send {spec.code}"
    return env


# -- clients ---------------------------------------------------------------------


class McpClient:
    """One MCP session acting as the host: binds every request, answers confirmations, checks envelopes."""

    def __init__(self, session: ClientSession, era: str, host: Host, confirmer: Confirmer) -> None:
        self.session = session
        self.era = era
        self.host = host
        self.confirmer = confirmer
        self.audit_ids: set[str] = set()

    @property
    def modern(self) -> bool:
        return self.era == "modern"

    async def list_tools(self, meta: dict[str, Any] | None = None) -> types.ListToolsResult:
        params = types.PaginatedRequestParams(_meta=cast(types.RequestParamsMeta, meta)) if meta is not None else None
        with anyio.fail_after(CALL_TIMEOUT + 5):
            return await self.session.send_request(
                types.ListToolsRequest(params=params), types.ListToolsResult, request_read_timeout_seconds=CALL_TIMEOUT
            )

    async def raw(
        self,
        tool: str,
        arguments: dict[str, Any] | None,
        meta: dict[str, Any] | None = None,
        *,
        request_state: str | None = None,
        input_responses: dict[str, Any] | None = None,
        timeout: float = CALL_TIMEOUT,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """One tools/call exactly as given (``meta=None`` sends no binding), read without client-side validation."""
        params = types.CallToolRequestParams(
            name=tool,
            arguments=arguments,
            _meta=cast("types.RequestParamsMeta | None", meta),
            request_state=request_state,
            input_responses=input_responses,
        )
        with anyio.fail_after(timeout + 5):
            result = await self.session.send_request(
                types.CallToolRequest(params=params), _RESULT, request_read_timeout_seconds=timeout
            )
        if isinstance(result, types.CallToolResult):
            env = check_envelope(tool, result)
            assert env["auditId"] == bound_audit_id(meta), "the envelope echoes the host's auditId (EMC-HP-052)"
            self.audit_ids.add(env["auditId"])
        else:
            assert self.modern, "only the modern era answers with InputRequiredResult"
        return result

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any] | None,
        meta: dict[str, Any] | None = None,
        *,
        bind: bool = True,
        timeout: float = CALL_TIMEOUT,
        **binding: Any,
    ) -> Result:
        """A bound call whose envelope the test wants; a modern-era request for input is answered by the Confirmer."""
        minted = meta is None and bind
        if minted:
            meta = self.host.meta(**binding)
        result = await self.raw(tool, arguments, meta, timeout=timeout)
        if isinstance(result, types.InputRequiredResult):
            request = result.input_requests[CONFIRMATION_INPUT_KEY]
            self.confirmer.asked.append(request.params.model_dump(by_alias=True, exclude_none=True))
            if minted:  # the retry is a call of its own, with its own audit id (EMC-HP-009)
                meta = self.host.meta(**binding)
            result = await self.raw(tool, arguments, meta, request_state=result.request_state,
                                    input_responses=self.confirmer.input_responses(), timeout=timeout)
            assert isinstance(result, types.CallToolResult), "one confirmation round is enough"
        return Result(tool, result)

    async def protocol_error(
        self, tool: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None
    ) -> MCPError:
        with pytest.raises(MCPError) as caught:
            await self.call(tool, arguments, meta, bind=False)
        return caught.value

    async def input_required(
        self, tool: str, arguments: dict[str, Any], meta: dict[str, Any]
    ) -> types.InputRequiredResult:
        result = await self.raw(tool, arguments, meta)
        assert isinstance(result, types.InputRequiredResult), f"expected a request for input, got {result}"
        return result


def bound_audit_id(meta: dict[str, Any] | None) -> str | None:
    """The audit_id claim of the binding in ``meta`` (read without verifying: the server has verified it)."""
    token = (meta or {}).get(HOST_BINDING_META_KEY)
    return jwt.decode(token, options={"verify_signature": False}).get("audit_id") if isinstance(token, str) else None


def assert_protocol_error(error: MCPError, expected: Any) -> None:
    assert (error.error.code, error.error.message) == (expected.jsonrpc_code, expected.message)
    assert error.error.data is None, "a protocol refusal never says why"


async def _open_session(session: ClientSession, era: str) -> None:
    with anyio.fail_after(START_TIMEOUT):
        if era == "legacy":
            await session.initialize()
        else:
            await session.discover()
            assert session.protocol_version == "2026-07-28"


@asynccontextmanager
async def stdio_client_for(
    ref: ReferenceDir, era: str, *, elicitation: bool = True, confirmer: Confirmer | None = None
) -> AsyncIterator[McpClient]:
    """``engram-reference serve --config`` over stdio; the process ends when the block does."""
    confirmer = confirmer or Confirmer()
    params = StdioServerParameters(command=ENGRAM[0], args=[*ENGRAM[1:], "serve", "--config", str(ref.config)])
    with open(ref.path / "server-stderr.log", "a", encoding="utf-8") as errlog:
        async with open_stdio(params, errlog=errlog) as (read, write):
            callback = confirmer.elicitation_callback if elicitation else None
            async with ClientSession(
                read, write, read_timeout_seconds=CALL_TIMEOUT, elicitation_callback=callback
            ) as session:
                await _open_session(session, era)
                yield McpClient(session, era, ref.host, confirmer)


@asynccontextmanager
async def http_client_for(
    server: HttpServer, era: str, *, elicitation: bool = True, confirmer: Confirmer | None = None
) -> AsyncIterator[McpClient]:
    confirmer = confirmer or Confirmer()
    headers = {"Authorization": f"Bearer {server.bearer}"}
    callback = confirmer.elicitation_callback if elicitation else None
    async with (
        httpx2.AsyncClient(headers=headers, timeout=CALL_TIMEOUT) as http,
        streamable_http_client(server.url, http_client=http) as (read, write),
        ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT, elicitation_callback=callback) as session,
    ):
        await _open_session(session, era)
        yield McpClient(session, era, server.ref.host, confirmer)


@pytest.fixture(scope="module", params=ERAS)
async def module_client(request: pytest.FixtureRequest, reference_dir: ReferenceDir) -> AsyncIterator[McpClient]:
    """One stdio server per era for the whole module, on the module's store."""
    async with stdio_client_for(reference_dir, request.param) as client:
        yield client


@pytest.fixture
def client(module_client: McpClient) -> McpClient:
    """The module's client, with a human who approves by default."""
    module_client.confirmer.reset()
    return module_client


class RawStdio:
    """The server over stdio, driven with raw JSON-RPC lines, so the test holds the process and can kill it."""

    def __init__(self, ref: ReferenceDir) -> None:
        self.process = subprocess.Popen(
            [*ENGRAM, "serve", "--config", str(ref.config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        self._buffer = b""
        self.server_requests: list[dict[str, Any]] = []  # requests and notifications the server sent
        self.elicitation_answer: dict[str, Any] | None = None  # how to answer elicitation/create, if at all

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def reply(self, request_id: int) -> dict[str, Any]:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + CALL_TIMEOUT
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                message = json.loads(line)
                if "method" in message:
                    self.server_requests.append(message)
                    if message["method"] == "elicitation/create" and self.elicitation_answer is not None:
                        self.send({"jsonrpc": "2.0", "id": message["id"], "result": self.elicitation_answer})
                elif message.get("id") == request_id:
                    return message
            remaining = deadline - time.monotonic()
            assert remaining > 0, "no reply in time"
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 65536)
                assert chunk, "the server closed stdout"
                self._buffer += chunk

    def request(self, request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return self.reply(request_id)

    def start_legacy(self, version: str = "2025-11-25", capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        init = self.request(1, "initialize", {"protocolVersion": version, "capabilities": capabilities or {},
                                              "clientInfo": {"name": "raw", "version": "1"}})
        assert "result" in init
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return init["result"]


# -- streamable HTTP -------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class HttpServer:
    ref: ReferenceDir
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def bearer(self) -> str:
        return self.ref.bearer


@contextmanager
def http_server(ref: ReferenceDir) -> Iterator[HttpServer]:
    """``engram-reference serve --http`` as a child process, up once it answers, stopped at the end."""
    port = free_port()
    with open(ref.path / "server-http-stderr.log", "ab") as errlog:
        process = subprocess.Popen(
            [*ENGRAM, "serve", "--config", str(ref.config), "--http", f"127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errlog,
        )
    server = HttpServer(ref, port, process)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert process.poll() is None, f"the HTTP server exited with {process.returncode}"
            try:
                if httpx2.post(server.url, json={}, timeout=2).status_code == 401:
                    break  # up, and guarded
            except httpx2.TransportError:
                pass
            assert time.monotonic() < deadline, "the HTTP server did not come up"
            time.sleep(0.05)
        yield server
    finally:
        stop(process)


def stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


# -- flows shared by several modules -----------------------------------------------


async def captured(client: McpClient, text: str | None = None, **binding: Any) -> dict[str, Any]:
    """Capture one candidate; its value (candidate_id, record_digest...)."""
    result = await client.call("engram_memory_capture", capture_args(text), **binding)
    assert result.value["status"] == "committed_pending"
    return result.value


async def admitted(client: McpClient, text: str | None = None, **binding: Any) -> tuple[str, str]:
    """Capture and admit one record; (candidate_id, record_id)."""
    candidate = await captured(client, text, **binding)
    result = await client.call("engram_memory_request_admission", admission_args(candidate["candidate_id"]), **binding)
    assert result.value["outcome"]["status"] == "accepted", result.value
    return candidate["candidate_id"], result.value["outcome"]["record_id"]


def store_files(ref: ReferenceDir) -> dict[str, bytes]:
    """The raw bytes of the store file and its -wal and -shm companions (absent ones as empty)."""
    out = {}
    for suffix in ("", "-wal", "-shm"):
        path = Path(f"{ref.store}{suffix}")
        out[suffix or "db"] = path.read_bytes() if path.exists() else b""
    return out
