"""Kill rate of the conformance harness against the faulty targets of tests/faulty/targets.py.

    python tools/kill_rate.py [VARIANT ...] [--workers N] [--no-control] [--keep DIR]

Initialises one reference configuration, then runs the real ``conformance``
command line against each variant (all of them unless named) on its own copy,
and against the plain reference over the same selections as a control. Prints
the table "variant | breaks | caught by | status" and the kill rate.

Exit status: 0 when every variant is caught and the control raises no alarm,
1 otherwise, 2 for an unknown variant name.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def catalog() -> ModuleType:
    """tests/faulty/targets.py, imported as the package it is (the repository's root on the path)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("tests.faulty.targets")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", help="variant names (default: the whole catalog)")
    parser.add_argument("--workers", type=int, default=3, help="runs in flight at once")
    parser.add_argument("--no-control", action="store_true", help="skip the run against the plain reference")
    parser.add_argument("--keep", type=Path, help="keep configurations and reports in this folder")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds one run may take")
    args = parser.parse_args(argv)
    targets = catalog()
    unknown = [name for name in args.variants if name not in targets.VARIANTS]
    if unknown:
        print(f"kill_rate: unknown variants {unknown}; see python tests/faulty/targets.py --list", file=sys.stderr)
        return 2
    chosen = [targets.VARIANTS[name] for name in (args.variants or targets.VARIANTS)]
    with tempfile.TemporaryDirectory(prefix="engram-kill-rate-") as scratch:
        base = args.keep or Path(scratch)
        base.mkdir(parents=True, exist_ok=True)
        template = base / "init"
        subprocess.run([sys.executable, "-m", "engram_mcp.reference._cli", "init", str(template)], check=True,
                       capture_output=True, timeout=120)
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
            control = None
            if not args.no_control:
                selections = sorted({prefix for item in chosen for prefix in item.select})
                control = pool.submit(targets.run_control, selections, template, base / "control", timeout=args.timeout)
            futures = {
                item.name: pool.submit(targets.run_variant, item, template, base / item.name, timeout=args.timeout)
                for item in chosen
            }
            judged = {name: future.result() for name, future in futures.items()}
            control_result = control.result() if control is not None else None
        for line in targets.table(chosen, judged):
            print(line)
        clean = True
        if control_result is not None:
            alarms = sorted(c for c, s in control_result.statuses.items() if s & {"FAIL", "WARN", "ERROR", "XPASS"})
            # 5: a --select run is partial, so incomplete at best; only a failure or an alarm is unclean.
            clean = control_result.exit_code in (0, 5) and not alarms and not control_result.problem
            print(f"control (plain reference): exit {control_result.exit_code}, alarms {alarms or 'none'}"
                  + (f", {control_result.problem}" if control_result.problem else ""))
        for item in chosen:
            verdict = judged[item.name].verdict(item)
            if verdict != "KILLED":
                print(f"  {item.name}: {verdict}")
        print(f"{len(chosen) + (control_result is not None)} runs in {time.monotonic() - started:.0f} s")
        if args.keep:
            print(f"reports kept in {base}")
    killed = all(judged[item.name].verdict(item) == "KILLED" for item in chosen)
    return 0 if killed and clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
