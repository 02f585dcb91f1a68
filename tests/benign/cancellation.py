"""Benign variants: cancellation. A server may still end a cancelled request: with no answer (as the reference
does), with the JSON-RPC error -32800, or with a CANCELLED envelope.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from tests.benign.catalog import WITHDRAW, variant
from tests.faulty.host import answer_cancelled_calls, envelope_answer
from tests.variant_server import Seams


def _ended(request_id: Any, tool: str, audit_id: str) -> Any:
    """withdraw's cancelled request ends with -32800, every other tool's with a CANCELLED envelope."""
    if tool == WITHDRAW:
        return types.JSONRPCError(jsonrpc="2.0", id=request_id,
                                  error=types.ErrorData(code=-32800, message="Request cancelled"))
    return envelope_answer(request_id, "CANCELLED", audit_id)


@variant("cancelled-call-answered", freedom="a cancelled request may get no answer, the JSON-RPC error -32800 or a "
         "CANCELLED envelope (EMC-HP-056)")
def cancelled_call_answered(seams: Seams) -> None:
    """A cancelled call is stopped and its request still ended: withdraw with -32800, the rest with CANCELLED."""
    answer_cancelled_calls(seams, _ended)
