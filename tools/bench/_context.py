"""What every measure is given: the options, the report, a scratch folder and the PostgreSQL server, if any."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from engram_mcp.reference._init import write_configuration
from tools.bench._report import Report
from tools.bench._stores import Backend, create_schema, drop_schema


@dataclass
class Context:
    report: Report
    smoke: bool
    sizes: list[int]
    cache: Path
    scratch: Path
    postgres: str | None  # a URL that answered, else None
    postgres_reason: str  # why PostgreSQL parts are skipped
    calls: int  # samples per latency case
    postgres_max_size: int | None = None  # larger PostgreSQL stores are not built (their build takes hours)

    def backends(self, part: str, size: int | None = None) -> list[Backend]:
        """SQLite, and PostgreSQL when it answers and the store is not over the PostgreSQL size cap (else the
        part's PostgreSQL half is reported skipped, with why)."""
        if self.postgres is None:
            self.report.skip(f"{part}/postgresql", self.postgres_reason)
            return ["sqlite"]
        if size is not None and self.postgres_max_size is not None and size > self.postgres_max_size:
            why = f"over --postgres-max-size {self.postgres_max_size:,} (raise it to measure this size)"
            self.report.skip(f"{part}/postgresql {size:,}", why)
            return ["sqlite"]
        return ["sqlite", "postgresql"]

    @contextmanager
    def fresh_configuration(self, backend: Backend) -> Iterator[Path]:
        """``engram-reference init`` into a new folder; on PostgreSQL, into a fresh schema dropped afterwards."""
        name = f"bench_fresh_{secrets.token_hex(4)}"
        directory = self.scratch / name
        url = None
        if backend == "postgresql":
            assert self.postgres is not None
            url = create_schema(self.postgres, name, fresh=True)
        write_configuration(directory, seed=secrets.token_hex(4), store_url=url)
        try:
            yield directory
        finally:
            if backend == "postgresql" and self.postgres is not None:
                drop_schema(self.postgres, name)
