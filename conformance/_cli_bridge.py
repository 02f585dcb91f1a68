"""``conformance bearer-bridge``: serve an HTTP target to clients that cannot send its bearer token or binding."""

from __future__ import annotations

import argparse
import ipaddress
import re
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from engram_mcp.conformance._defaults import EXIT_UNREACHABLE, EXIT_USAGE
from engram_mcp.conformance._errors import ConformanceError
from engram_mcp.conformance._words import spoken

if TYPE_CHECKING:
    from engram_mcp.conformance._bridge import Binder

PROG = "conformance bearer-bridge"
TOKEN68 = re.compile(r"[A-Za-z0-9._~+/-]+=*")  # RFC 6750 §2.1: what may follow "Bearer "
SESSION = "bearer-bridge"  # the agent session its bindings name
BRIDGE_EPILOG = """The server's DNS-rebinding protection judges the Host the client sends, so run the server on another
loopback address with the same port: --upstream http://127.0.0.2:PORT behind --listen 127.0.0.1:PORT.
It says "listening on …" on stderr once the port is bound, and runs until it is stopped.

exit codes:
  2  usage error (an option, the token file or the profile cannot be used)
  3  the listening address cannot be bound"""


class UsageError(ConformanceError):
    """An option cannot be used; the message says which and why."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=BRIDGE_EPILOG,
        description="Forward every HTTP request to an MCP endpoint with the host bearer token added and, with\n"
                    "--bind-as, a host binding in the _meta of 2026-07-28 era tools/list and tools/call requests.")
    parser.add_argument("--upstream", required=True, metavar="URL",
                        help="the server's origin, e.g. http://127.0.0.2:8766 (each request keeps its own path)")
    parser.add_argument("--listen", required=True, metavar="HOST:PORT", help="where clients connect, e.g. "
                        "127.0.0.1:8766")
    parser.add_argument("--token-file", required=True, type=Path, metavar="FILE",
                        help="the host bearer token (the reference's keys/http-bearer.txt)")
    parser.add_argument("--bind-as", type=Path, metavar="PROFILE",
                        help="a conformance profile: bind as its host, for its first scope with memory on and the "
                             "first of that scope's principals granted the most tools")
    return parser


def listen_address(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"--listen {spoken(text)} is not HOST:PORT (e.g. 127.0.0.1:8766, [::1]:8766)")
    return host, int(port)


def upstream_origin(text: str) -> str:
    try:
        parts = urlsplit(text)
        port = parts.port  # a malformed port raises here
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--upstream {spoken(text)} is not an http(s):// URL")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise UsageError(f"--upstream {spoken(text)}: give the origin only (scheme, host and port, e.g. "
                         "http://127.0.0.2:8766); each request keeps its own path, /mcp included")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def read_token(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as problem:
        why = problem.strerror or type(problem).__name__
        raise UsageError(f"--token-file {path}: cannot read it ({why})") from None
    except UnicodeDecodeError:
        raise UsageError(f"--token-file {path}: not UTF-8 text") from None
    if not TOKEN68.fullmatch(token):
        raise UsageError(f"--token-file {path}: " + ("empty" if not token else
                         "not a bearer token (one line of letters, digits and -._~+/, then any '=')"))
    return token


def profile_binder(path: Path) -> tuple[Binder, str]:
    """The binder of the profile's host, and which scope and principal it binds."""
    from engram_mcp.conformance._profile import ProfileError, load_profile
    from engram_mcp.conformance.hosts import host_from_profile

    try:
        profile = load_profile(path)
        if not profile.given:
            raise ProfileError(f"{path}: the profile has no [binding] table, so there is no host to bind as")
        host, _ = host_from_profile(profile)
    except ProfileError as problem:
        raise UsageError(f"--bind-as: {problem}") from None
    scope = profile.find(lambda s: s.memory and bool(s.principals))
    if scope is None:
        raise UsageError(f"--bind-as {path}: no scope has memory on and a principal to bind")
    # The first of those granted the most, in the profile's order, so the choice reads off the file.
    principal = max(scope.principals, key=lambda p: len(scope.principals[p]))

    def binder() -> dict[str, Any]:
        return host.meta(scope, principal, session=SESSION)

    return binder, f"{scope.label} as {principal}"


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listening_socket(host: str, port: int) -> socket.socket:
    """Bound here rather than by uvicorn, so that a taken port is one clear line instead of a log record."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def bearer_bridge(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        host, port = listen_address(args.listen)
        upstream = upstream_origin(args.upstream)
        token = read_token(args.token_file)
        binder: Binder | None = None
        bound = None
        if args.bind_as is not None:
            binder, bound = profile_binder(args.bind_as)
    except UsageError as problem:
        print(f"{PROG}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        sock = _listening_socket(host, port)
    except OSError as problem:
        print(f"{PROG}: cannot listen on {args.listen}: {problem.strerror or type(problem).__name__}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if not _loopback(host):
        print(f"{PROG}: warning: {args.listen} is not a loopback address; whoever reaches it is served with the "
              "host's token" + (" and bindings" if bound else ""), file=sys.stderr)
    shown = f"[{host}]" if ":" in host else host
    line = (f"{PROG}: listening on http://{shown}:{sock.getsockname()[1]}, forwarding to {upstream} with the bearer "
            "token" + (f" and host bindings for {bound}" if bound else ""))
    _serve(sock, upstream, token, binder, line)
    return 0


def _serve(sock: socket.socket, upstream: str, token: str, binder: Binder | None, line: str) -> None:
    import uvicorn

    from engram_mcp.conformance._bridge import BearerBridge

    class Announcing(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                print(line, file=sys.stderr, flush=True)

    config = uvicorn.Config(BearerBridge(upstream, token, binder), log_level="warning", lifespan="on")
    with sock:
        Announcing(config).run(sockets=[sock])
