"""Exceptions the contract package raises (its error *table* is data: ``load().errors``); all are ContractError."""

from engram_mcp.contract._errors import ContractError
from engram_mcp.contract.binding import BindingRejected, StateRejected

__all__ = ["BindingRejected", "ContractError", "StateRejected"]
