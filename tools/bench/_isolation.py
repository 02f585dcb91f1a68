"""isolation: one tenant's get while another tenant forgets, or has captures rejected, in a loop.

Each round runs four blocks back to back on the same cached store (the largest size built for the backend):
a quiet one; one with another process looping the other tenant's captures and admissions, the control, which
loads the machine as the next two do but queues no erasure; one looping capture, admission and forget; and one
looping captures that admission rejects (secret-looking text, as an agent can send without any human), each
erasure queued on the store. The loops run in a process of their own on the same store, as
another server process would, so they share no interpreter lock with the timed gets. Between blocks the
store's queued erasures are left to settle, so a quiet block is quiet. The get's figures in each noisy block
are given as ratios to the quiet blocks of the same rounds.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from engram_mcp.conformance._world import capture_arguments
from engram_mcp.contract.binding import Binding
from engram_mcp.reference._core import Engine
from tools.bench._context import Context
from tools.bench._engine import PURPOSE, caller, capture_and_admit, open_engine
from tools.bench._inprocess import open_store, size_label
from tools.bench._stats import timed
from tools.bench._text import TextSource

READER = caller("globex", "research")  # the tenant whose gets are timed; the store's records are acme's
SECRET = "Deploy key AKIA" + "Q" * 16 + " for the build."  # what secret-scan admission rejects
GET_PAUSE = 0.005  # seconds between two of the reader's gets: a steady client, not a saturating one
SETTLE_AT_MOST = 120.0  # seconds a block waits for the erasures it queued to settle


def forgets(engine: Engine, stop: threading.Event) -> None:
    who, text, counter = caller(), TextSource(seed=11), itertools.count()
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")
    while not stop.is_set():
        key = f"iso-forget-{stamp}-{next(counter)}"
        record_id = capture_and_admit(engine, who, f"{text.sentence()} {key}", key)
        engine.call("engram_memory_forget", who, {"record_id": record_id, "idempotency_key": f"f-{key}",
                                                  "reason_ref": "reason:bench"}, datetime.now(UTC))


def admissions(engine: Engine, stop: threading.Event) -> None:
    """The control: the forget loop's captures and admissions without the forget, so no erasure at all."""
    who, text, counter = caller(), TextSource(seed=13), itertools.count()
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")
    while not stop.is_set():
        key = f"iso-admit-{stamp}-{next(counter)}"
        capture_and_admit(engine, who, f"{text.sentence()} {key}", key)


def rejections(engine: Engine, stop: threading.Event) -> None:
    who, counter = caller(), itertools.count()
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")
    while not stop.is_set():
        key = f"iso-reject-{stamp}-{next(counter)}"
        captured = engine.call("engram_memory_capture", who,
                               capture_arguments(PURPOSE, text=f"{SECRET} {key}", key=f"c-{key}"), datetime.now(UTC))
        if captured.value is not None:
            engine.call("engram_memory_request_admission", who,
                        {"candidate_id": captured.value["candidate_id"], "idempotency_key": f"a-{key}"},
                        datetime.now(UTC))


def reader_block(engine: Engine, record_ids: list[str], seconds: float) -> list[float]:
    samples, upcoming = [], itertools.cycle(record_ids)
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        arguments = {"record_id": next(upcoming), "purpose_ref": PURPOSE}
        samples.append(timed(partial(engine.call, "engram_memory_get", READER, arguments, datetime.now(UTC))))
        time.sleep(GET_PAUSE)
    return samples


def settle(engine: Engine) -> None:
    ends = time.monotonic() + SETTLE_AT_MOST
    while engine.store.erasures.outstanding() and time.monotonic() < ends:
        time.sleep(0.2)


LOOPS: dict[str, Callable[[Engine, threading.Event], None]] = {
    "admission": admissions, "forget": forgets, "rejection": rejections,
}


def noisy(engine: Engine, directory: Path, loop: str, record_ids: list[str], seconds: float) -> list[float]:
    """The reader's block while another process on the store runs ``loop``; its erasures settled after."""
    noise = subprocess.Popen([sys.executable, "-m", "tools.bench._isolation", str(directory), loop],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert noise.stdout is not None and noise.stdout.readline() == "looping\n"
    try:
        return reader_block(engine, record_ids, seconds)
    finally:
        noise.communicate(timeout=120)  # closing its input stops the loop
        settle(engine)


def reader_records(engine: Engine, who: Binding, count: int) -> list[str]:
    text = TextSource(seed=5)
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")
    return [capture_and_admit(engine, who, text.sentence(), f"iso-reader-{stamp}-{i}") for i in range(count)]


def run_isolation(ctx: Context) -> None:
    rounds = 2 if ctx.smoke else max(3, ctx.calls // 60)
    seconds = 0.5 if ctx.smoke else 4.0
    size = max(ctx.sizes)
    for backend in ctx.backends("isolation", size):
        with ExitStack() as stack:
            engine, built = open_store(ctx, stack, backend, size)
            record_ids = reader_records(engine, READER, 10)
            cases: dict[str, list[float]] = {"quiet": [], **{f"{loop} loop": [] for loop in LOOPS}}
            for _ in range(rounds):
                cases["quiet"] += reader_block(engine, record_ids, seconds)
                for loop in LOOPS:
                    cases[f"{loop} loop"] += noisy(engine, built.directory, loop, record_ids, seconds)
        anchor = None
        for case, values in cases.items():
            name = f"{backend} {size_label(size)} another tenant's get, {case}"
            target = "within noise of the control" if case in ("forget loop", "rejection loop") else ""
            ctx.report.latency("isolation", name, values, anchor=anchor, target=target)
            anchor = anchor or name


def main(directory: str, loop: str) -> None:
    """The noise process: ``loop`` on the store of the configuration in ``directory`` until its input closes."""
    engine, _config, store = open_engine(Path(directory))
    stop = threading.Event()
    worker = threading.Thread(target=LOOPS[loop], args=(engine, stop), daemon=True)
    worker.start()
    print("looping", flush=True)
    sys.stdin.read()
    stop.set()
    worker.join(60)
    store.close()


if __name__ == "__main__":
    main(*sys.argv[1:3])
