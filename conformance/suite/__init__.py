"""The conformance suite: one module per area of the contract, each check tied to requirement ids."""
