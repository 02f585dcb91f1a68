"""Schemathesis draws kept on disk: a draw is a pure function of its inputs, so the next run reads it back.

Drawing is the costliest part of generating cases (most of ten seconds of CPU
for the default budget, beside a run that needs that core). What a draw gives
depends on the tool's advertised schema, the seed and the count, the versions of
Python, hypothesis and schemathesis, and the source of every local module
imported when it draws, since hypothesis mixes those modules' literal constants
into its choices (see ``families/schemathesis.py``). The key hashes all of them,
so a change to any is a miss, and a miss draws afresh. A body is kept only if
its JSON form reads back exactly, and a file that cannot be read is a miss: the
cache never changes which cases a run sends, only how long drawing them takes.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

KEEP_ENV = "ENGRAM_CONFORMANCE_DRAWS"  # "fresh": draw every time, keep nothing
KEPT_AT_MOST = 240  # draws kept (12 make one run's set: six tools, two modes)


def cache_home(part: str) -> Path | None:
    """One of the harness's cache directories in the user's cache, created; None when it cannot be."""
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "engram-mcp-conformance" / part
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return home


def _drawn_home() -> Path | None:
    return None if os.environ.get(KEEP_ENV) == "fresh" else cache_home("drawn")


def draw_key(tool: str, mode: str, seed: int, examples: int, schema: Any) -> str:
    """What a draw depends on, hashed (computed when drawing would start: the local modules imported by then)."""
    digest = hashlib.sha256()
    versions = [sys.version, _version("hypothesis"), _version("schemathesis")]
    digest.update(json.dumps([tool, mode, seed, examples, versions, schema], sort_keys=True).encode())
    digest.update(_sources_digest(tuple(_local_sources())))
    return digest.hexdigest()


@functools.lru_cache(maxsize=8)
def _sources_digest(sources: tuple[tuple[str, Path, int, int], ...]) -> bytes:
    """The local modules' sources, read and hashed once per set of files as they stand (name, path, mtime, size):
    the twelve draws of a run share one."""
    digest = hashlib.sha256()
    for name, path, _, _ in sources:
        digest.update(f"\0{name}\0".encode())
        try:
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        except OSError:  # gone or unreadable since it was imported: a key no run will meet again, so a miss
            digest.update(os.urandom(16))
    return digest.digest()


def read(key: str) -> tuple[Any, ...] | None:
    """The bodies kept under ``key``, or None (nothing kept, or nothing readable)."""
    home = _drawn_home()
    if home is None:
        return None
    try:
        lines = (home / f"{key}.jsonl").read_text(encoding="utf-8").splitlines()
        return tuple(_decoded(json.loads(line)) for line in lines)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def keep(key: str, bodies: Sequence[Any]) -> None:
    """Keep the bodies under ``key`` if every one reads back exactly; written whole or not at all."""
    home = _drawn_home()
    if home is None:
        return
    try:
        lines = [json.dumps(_encoded(body), ensure_ascii=True, allow_nan=True) for body in bodies]
        if any(repr(_decoded(json.loads(line))) != repr(body) for line, body in zip(lines, bodies, strict=True)):
            return  # a value JSON does not carry exactly (a tuple, a non-string key): drawn afresh each time
        handle, temporary = tempfile.mkstemp(dir=home, prefix=".drawn-")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write("".join(line + "\n" for line in lines))
        os.replace(temporary, home / f"{key}.jsonl")
        _prune(home, written=home / f"{key}.jsonl")
    except (OSError, TypeError, ValueError, RecursionError):
        return


def _prune(home: Path, written: Path) -> None:
    """Keep the newest KEPT_AT_MOST draws, the one just written first: every edit of the harness's source makes a
    new set of keys, and timestamps a few milliseconds apart may be equal."""
    others = sorted((path for path in home.glob("*.jsonl") if path != written),
                    key=lambda path: path.stat().st_mtime, reverse=True)
    for stale in others[KEPT_AT_MOST - 1:]:
        stale.unlink(missing_ok=True)


def _encoded(body: Any) -> dict[str, Any]:
    if isinstance(body, bytes | bytearray):
        return {"bytes": base64.b64encode(bytes(body)).decode("ascii")}
    return {"json": body}


def _decoded(record: dict[str, Any]) -> Any:
    return base64.b64decode(record["bytes"]) if "bytes" in record else record["json"]


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "absent"


@functools.cache
def _outside() -> tuple[str, ...]:
    """The standard library's and installed packages' folders, as written and resolved."""
    paths = sysconfig.get_paths()
    folders = {paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"]}
    return tuple(sorted(folders | {str(Path(folder).resolve()) for folder in folders}))


def _local_sources() -> list[tuple[str, Path, int, int]]:
    """Every imported module's source outside the standard library and site-packages, by module name, with its
    modification time and size."""
    outside = _outside()
    found = []
    for name, module in sorted(sys.modules.copy().items()):  # a copy: another thread may import meanwhile
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or not file.endswith(".py") or "/site-packages/" in file \
                or file.startswith(outside):
            continue
        path = Path(file).resolve()
        if str(path).startswith(outside):
            continue
        try:
            stat = path.stat()
        except OSError:
            continue
        found.append((name, path, stat.st_mtime_ns, stat.st_size))
    return found
