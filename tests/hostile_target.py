"""A hostile stdio target: the reference server behind a pipe that writes what a server must not, first.

    python tests/hostile_target.py --config SERVER_TOML [--deep-first]

Right after the reference's first line (its answer to the opening request), every session's stdout gets a log
line, a JSON-RPC batch, a response to an id the client never sent and progress for a token it never gave: the
four violations the transport checks judge. ``--deep-first`` writes, before them, one valid notification nested
DEPTH levels deep, which a reader that is not built for it dies on (and then hears nothing of what follows but
what it read before). The harness must judge the session
all the same: tests/conformance/test_hostile_targets.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

DEPTH = 100_000
VIOLATIONS = [
    "server starting up, listening on stdio",
    json.dumps([{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}]),
    json.dumps({"jsonrpc": "2.0", "id": 987654, "result": {}}),
    json.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": "never-given", "progress": 1}}),
]


def deep_notification(depth: int = DEPTH) -> str:
    """A notification whose params hold ``depth`` nested arrays: valid JSON-RPC, absurdly deep."""
    return '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":' + \
        "[" * depth + "]" * depth + "}}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--deep-first", action="store_true")
    args = parser.parse_args(argv)
    out = sys.stdout.buffer
    lines = ([deep_notification()] if args.deep_first else []) + VIOLATIONS
    injected = "".join(line + "\n" for line in lines).encode()
    server = subprocess.Popen([sys.executable, "-m", "engram_mcp.reference", "serve", "--config", str(args.config)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None

    def forward() -> None:
        assert server.stdin is not None
        for chunk in iter(lambda: os.read(0, 65536), b""):
            server.stdin.write(chunk)
            server.stdin.flush()
        server.stdin.close()

    threading.Thread(target=forward, daemon=True).start()
    for line in iter(server.stdout.readline, b""):
        out.write(line + injected)  # after the first line only: the rest passes as the reference wrote it
        out.flush()
        injected = b""
    return server.wait()


if __name__ == "__main__":
    raise SystemExit(main())
