"""The harness's one exception base: every exception it raises to its callers and host adapters is one."""


class ConformanceError(Exception):
    """Something the harness refused or could not do (profile, target, certificate, counterexample)."""
