"""Evidence as it is published: no credential, no binding, no key, and no long text.

Every report (report.jsonl, report.html, junit.xml), counterexample and trace writes what a target answered
through here: members whose names say they hold a secret are replaced, and so is any text that looks like a
signed token or a key, wherever it sits (a target may echo one back inside a message).
"""

from __future__ import annotations

import re
from typing import Any

SECRET_KEYS = re.compile(r"binding|token|authorization|_meta|requeststate|request_state|key$", re.I)
# A compact JWS or JWT (three base64url parts, the first a JSON header), or a PEM block.
_SECRET_TEXT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*|"
                          r"-----BEGIN [A-Z ]*KEY-----[\s\S]*?(?:-----END [A-Z ]*KEY-----|$)")
TEXT_CHARS = 1000  # of one string kept in evidence
ITEMS = 50  # of one list kept in evidence
REDACTED = "[redacted]"


def redact(value: Any, key: str = "") -> Any:
    """``value`` with its secrets replaced and its strings and lists bounded."""
    if SECRET_KEYS.search(key):
        return REDACTED
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        kept = [redact(v, key) for v in value[:ITEMS]]
        return kept + [f"… [{len(value) - ITEMS} more]"] if len(value) > ITEMS else kept
    if isinstance(value, str):
        value = _SECRET_TEXT.sub(REDACTED, value)
        return value[:TEXT_CHARS] + f"… [{len(value)} characters]" if len(value) > TEXT_CHARS else value
    return value
