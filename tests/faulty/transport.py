"""Faulty variants: transport. Each writes bytes on stdout before the server serves (banner lines, or a JSON-RPC
message no request asked for), as a wrapper script or a server's own code might outside the SDK. The bytes are
written when the variant is applied, before the server is built, so no seam of the server records them.
"""

from __future__ import annotations

import json
from typing import Any

from tests.faulty.catalog import variant
from tests.variant_server import Seams


@variant("banner-on-stdout", breaks=["EMC-HP-073"], caught_by=["transport.stdout-only-mcp"], era="legacy",
         outside_seams=True)
def banner_on_stdout(seams: Seams) -> None:
    """Two banner lines on stdout before serving, as a wrapper script that echoes its start writes them."""
    print("Engram memory server starting", flush=True)
    print("listening on stdio", flush=True)


def _write_at_start(message: dict[str, Any]) -> None:
    """One JSON-RPC message on stdout before serving: what a server's own code might write outside the SDK."""
    print(json.dumps(message), flush=True)


@variant("null-id-request", breaks=["EMC-HP-074"], caught_by=["transport.jsonrpc-frames"], era="modern",
         outside_seams=True)
def null_id_request(seams: Seams) -> None:
    """A ping request whose id is null at start, which MCP forbids (a null id is no request id)."""
    _write_at_start({"jsonrpc": "2.0", "id": None, "method": "ping"})


@variant("response-to-unknown-id", breaks=["EMC-HP-075"], caught_by=["transport.responses-answer-requests"],
         era="legacy", outside_seams=True)
def response_to_unknown_id(seams: Seams) -> None:
    """A result at start for a request id the client never sent, as a server replaying a stale answer would."""
    _write_at_start({"jsonrpc": "2.0", "id": "engram-startup", "result": {}})


@variant("progress-unasked", breaks=["EMC-HP-076"], caught_by=["transport.notifications-asked-for"], era="modern",
         outside_seams=True)
def progress_unasked(seams: Seams) -> None:
    """Progress at start for a token no request carried."""
    _write_at_start({"jsonrpc": "2.0", "method": "notifications/progress",
                     "params": {"progressToken": "engram-startup", "progress": 0}})
