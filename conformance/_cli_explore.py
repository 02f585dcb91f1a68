"""``conformance replay FILE`` and ``conformance diff --target A --target B``: exploration from the command line.

replay runs a counterexample (a failed exploration's JSON lines) again against any target and says whether it
still fails: exit 1 it does, 0 it no longer does, 3 it could not be run there. diff drives the same generated
sequences into two targets and reports the first step where their answers fall into different classes: one
allowed and the other not, or two allowed answers of which only one breaks a pin of this project's profile.
Answers that differ only where the contract leaves a choice are counted, not reported: both servers certify.
Exit 0 no divergence, 1 a divergence, 3 a run could not be judged.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_mcp.conformance._checks import Status
from engram_mcp.conformance._cli_run import judge, run_parser
from engram_mcp.conformance._defaults import (
    EXIT_CONFORMANT,
    EXIT_INCOMPLETE,
    EXIT_MUST_FAILED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from engram_mcp.conformance._explore import CounterexampleError, read_counterexample
from engram_mcp.conformance._words import spoken
from engram_mcp.conformance.plugin import EXPLORE_DEFAULT, REPLAY_CHECK

EXPLORE_CHECK = "explore.sequences"


def _replay_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="conformance replay", description="Run a counterexample again.")
    parser.add_argument("file", type=Path, help="a counterexample written by a failed exploration (JSON lines)")
    parser.add_argument("--target", required=True, help="stdio:CMD, an http(s):// URL, or reference")
    parser.add_argument("--profile", type=Path, help="the target's conformance profile")
    parser.add_argument("--report-dir", type=Path, help="where to write the reports of the replay")
    parser.add_argument("--call-timeout", type=float, default=30.0)
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def replay_command(argv: list[str]) -> int:
    args = _replay_parser().parse_args(argv)
    try:
        counterexample = read_counterexample(args.file)
    except CounterexampleError as problem:
        print(f"conformance replay: {problem}", file=sys.stderr)
        return EXIT_USAGE
    run_args = run_parser().parse_args(
        ["--target", args.target, "--select", REPLAY_CHECK, "--era", counterexample.era,
         "--call-timeout", str(args.call_timeout), "--replay", str(args.file.resolve()),
         *(["--profile", str(args.profile)] if args.profile else []),
         *(["--report-dir", str(args.report_dir)] if args.report_dir else []), *(["-v"] if args.verbose else [])])
    _, finished = judge(run_args)
    results = [r for r in (finished.results if finished else []) if r.check_id == REPLAY_CHECK
               and r.era == counterexample.era]
    if not results:
        print("conformance replay: the counterexample was not run (see the output above)", file=sys.stderr)
        return EXIT_UNREACHABLE
    result = results[0]
    if result.status is Status.FAIL:
        print(f"REPLAY: {result.message}")
        return EXIT_MUST_FAILED
    if result.status is Status.PASS:
        print(f"REPLAY: no longer fails ({len(counterexample.program.steps)} steps, {counterexample.era} era)")
        return EXIT_CONFORMANT
    print(f"REPLAY: not run — {result.status.value} {result.message}")
    return EXIT_UNREACHABLE


# -- diff ------------------------------------------------------------------------------------------------------


def _diff_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="conformance diff",
                                     description="Drive the same generated call sequences into two targets.")
    parser.add_argument("--target", action="append", required=True, help="give it twice: A, then B")
    parser.add_argument("--profile", action="append", type=Path, default=[],
                        help="the targets' conformance profiles: once for both (the bundled reference keeps its "
                             "own), or once per target in order")
    parser.add_argument("--era", choices=["legacy", "modern", "both"], default="both")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--explore", type=int, default=EXPLORE_DEFAULT, metavar="N", help="calls per era")
    parser.add_argument("--call-timeout", type=float, default=30.0)
    return parser


@dataclass(frozen=True)
class Divergence:
    key: tuple[str, int, int]  # era, program, step
    why: str
    first: Mapping[str, Any] | None
    second: Mapping[str, Any] | None


def _trace(path: Path) -> dict[tuple[str, int, int], dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()] \
        if path.exists() else []
    return {(line["era"], int(line["program"]), int(line["n"])): line for line in lines}


def _class(line: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    return str(line.get("verdict", "not judged")), tuple(line.get("matched") or (line.get("seen"),))


def compare(first: Mapping[tuple[str, int, int], Mapping[str, Any]],
            second: Mapping[tuple[str, int, int], Mapping[str, Any]]) -> tuple[Divergence | None, int, int]:
    """The first divergence in step order, the steps compared, and how many differ only within the contract."""
    free = compared = 0
    for key in sorted(set(first) | set(second)):
        a, b = first.get(key), second.get(key)
        if a is None or b is None:
            return Divergence(key, "one target ran a step the other never reached", a, b), compared, free
        compared += 1
        if a.get("tool") != b.get("tool"):
            return Divergence(key, "the two runs drew different sequences (not the same profile?)", a, b), \
                compared, free
        (verdict_a, kind_a), (verdict_b, kind_b) = _class(a), _class(b)
        if verdict_a != verdict_b:
            return Divergence(key, "one answer is allowed by the contract, the other is not", a, b), compared, free
        if kind_a != kind_b:
            if bool(a.get("pins")) != bool(b.get("pins")):
                return Divergence(key, "two allowed answers; the pins one of them", a, b), compared, free
            free += 1
    return None, compared, free


def _describe(line: Mapping[str, Any] | None) -> str:
    """A step of a trace in words: what the target answered, the verdict, the allowed answers it matched."""
    if line is None:
        return "no such step"
    matched = [str(name) for name in line.get("matched") or ()]
    words = f"{line.get('seen', 'nothing recorded')} ({line.get('verdict', 'not judged')}" + (
        f", as {spoken(matched)})" if matched else ")")
    pins = [str(pin) for pin in line.get("pins") or ()]
    return words + (f"; breaks the pins {', '.join(pins)}" if pins else "")


def _explore(target: str, profile: Path | None, args: argparse.Namespace, workdir: Path) -> subprocess.Popen[str]:
    trace = workdir / "trace.jsonl"
    line = [sys.executable, "-m", "engram_mcp.conformance._cli", "--target", target, "--select", EXPLORE_CHECK,
            "--era", args.era, "--seed", str(args.seed), "--explore", str(args.explore), "--explore-shrink", "0",
            "--explore-trace", str(trace), "--report-dir", str(workdir / "report"),
            "--call-timeout", str(args.call_timeout)]
    if profile is not None:
        line += ["--profile", str(profile)]
    return subprocess.Popen(line, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def diff_command(argv: list[str]) -> int:
    parser = _diff_parser()
    args = parser.parse_args(argv)
    if len(args.target) != 2:
        parser.error("give --target exactly twice")
    if len(args.profile) > 2:
        parser.error("give --profile once (both targets) or twice (one per target)")
    # One profile serves both targets, but the bundled reference, which brings its own.
    profiles: Sequence[Path | None] = args.profile if len(args.profile) == 2 else \
        [None if target == "reference" or not args.profile else args.profile[0] for target in args.target]
    with tempfile.TemporaryDirectory(prefix="engram-diff-") as scratch:
        dirs = [Path(scratch) / "a", Path(scratch) / "b"]
        for directory in dirs:
            directory.mkdir()
        runs = [_explore(t, p, args, d) for t, p, d in zip(args.target, profiles, dirs, strict=True)]
        outputs = [process.communicate()[0] for process in runs]
        for target, process, output, directory in zip(args.target, runs, outputs, dirs, strict=True):
            judged = process.returncode in (EXIT_MUST_FAILED, EXIT_INCOMPLETE)
            if not judged or not (directory / "trace.jsonl").exists():
                print(f"conformance diff: the exploration of {target} was not judged (exit {process.returncode})",
                      file=sys.stderr)
                print(output[-2000:], file=sys.stderr)
                return EXIT_UNREACHABLE
        divergence, compared, free = compare(_trace(dirs[0] / "trace.jsonl"), _trace(dirs[1] / "trace.jsonl"))
    print(f"DIFF: {compared} steps compared (seed {args.seed}); {free} differ only where the contract leaves a choice")
    if divergence is None:
        print("DIFF: no divergence")
        return EXIT_CONFORMANT
    era, program, step = divergence.key
    shown = divergence.first or divergence.second or {}
    print(f"DIFF: first divergence at {era} era, program {program}, step {step} "
          f"({str(shown.get('tool', '')).removeprefix('engram_memory_')}, {shown.get('note', '')}): {divergence.why}")
    print(f"  A {args.target[0]}: {_describe(divergence.first)}")
    print(f"  B {args.target[1]}: {_describe(divergence.second)}")
    return EXIT_MUST_FAILED
