"""The contract package's one exception base: every exception it raises to a caller is one."""


class ContractError(Exception):
    """Something the contract's shared code refused (a binding, a sealed confirmation state)."""
