"""The reference server's one exception base: every exception it raises to a caller is one."""


class ReferenceServerError(Exception):
    """Something the reference server refused or could not do (configuration, store, seal, refusal)."""
