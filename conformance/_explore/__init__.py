"""Exploration: generated call sequences judged by the contract model, shrunk, and written as counterexamples.

``_program`` draws programs from a seed; ``_execute`` runs one against a target through ``World`` (every call
judged by the model); ``_shrink`` reduces a failing one; ``_files`` writes and reads counterexamples and traces.
"""

from engram_mcp.conformance._explore._execute import Execution, Outcome, callers, execute, new_salt, scopes_of
from engram_mcp.conformance._explore._files import (
    Counterexample,
    CounterexampleError,
    read_counterexample,
    trace_lines,
    write_counterexample,
)
from engram_mcp.conformance._explore._program import CallerRole, Program, Step, draw
from engram_mcp.conformance._explore._shrink import Shrunk, shrink

__all__ = ["CallerRole", "Counterexample", "CounterexampleError", "Execution", "Outcome", "Program", "Shrunk",
           "Step", "callers", "draw", "execute", "new_salt", "read_counterexample", "scopes_of", "shrink",
           "trace_lines", "write_counterexample"]
