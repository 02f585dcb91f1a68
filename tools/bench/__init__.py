"""Benchmarks of the reference server: ``python -m tools.bench --help`` (see the README, Benchmarks)."""
