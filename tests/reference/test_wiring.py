"""The store factory: ``[store] url`` picks the store, and the server takes its ports through its constructor."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

import pytest

from engram_mcp.reference._config import ConfigError, load_config
from engram_mcp.reference._crypto import AesGcmCipher
from engram_mcp.reference._server import ReferenceServer
from engram_mcp.reference._store import SqliteStore
from engram_mcp.reference._wiring import ServerPorts, open_store


def test_without_a_store_table_or_with_sqlite_the_embedded_store_is_used(make_reference_dir: Any) -> None:
    ref = make_reference_dir()
    assert load_config(ref.config).store_url is None
    ref.edit(lambda data: data.update(store={"url": "sqlite:"}))
    config = load_config(ref.config)
    assert config.store_url is None
    store = open_store(config)
    try:
        assert isinstance(store, SqliteStore) and store.path == config.store
    finally:
        store.close()


def test_a_postgresql_url_is_kept_for_the_factory(make_reference_dir: Any) -> None:
    ref = make_reference_dir()
    ref.edit(lambda data: data.update(store={"url": "postgresql://db.internal/memory"}))
    assert load_config(ref.config).store_url == "postgresql://db.internal/memory"


@pytest.mark.parametrize("table", [{"url": "mysql://db/memory"}, {"url": 5}, {"url": "sqlite:", "pool": 3},
                                   {"url": "sqlite:/elsewhere/memory.sqlite3"}])
def test_an_unusable_store_table_is_refused(make_reference_dir: Any, table: dict[str, Any]) -> None:
    ref = make_reference_dir()
    ref.edit(lambda data: data.update(store=table))
    with pytest.raises(ConfigError, match="store"):
        load_config(ref.config)


def test_an_sqlite_server_never_imports_the_postgresql_store(make_reference_dir: Any) -> None:
    ref = make_reference_dir()
    script = (
        "import sys; from engram_mcp.reference._config import load_config; "
        "from engram_mcp.reference._server import ReferenceServer; "
        f"server = ReferenceServer(load_config({str(ref.config)!r})); server.close(); "
        "loaded = [m for m in sys.modules if m.startswith('psycopg') or m.endswith('_postgres')]; "
        "assert not loaded, loaded"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_server_runs_on_the_ports_it_is_given(make_reference_dir: Any) -> None:
    ref = make_reference_dir()
    config = load_config(ref.config)
    store = SqliteStore(config.store.with_name("given.sqlite3"))
    cipher = AesGcmCipher(os.urandom(32))
    server = ReferenceServer(config, ServerPorts(store=store, cipher=cipher, policies=config.policy_for))
    try:
        assert server.store is store and server.engine.store is store and server.audit.store is store
        assert server.engine.cipher is cipher and server.engine.lifecycle.policy_for == config.policy_for
    finally:
        server.close()
    assert not config.store.exists()  # the configured file was never opened


def test_a_malformed_postgresql_url_is_refused_without_its_password(make_reference_dir: Any) -> None:
    ref = make_reference_dir()
    ref.edit(lambda data: data.update(store={"url": "postgresql://app:s3cretPW@[::1/memory"}))
    with pytest.raises(ConfigError) as refused:
        load_config(ref.config)
    assert "s3cretPW" not in str(refused.value)


def test_the_postgresql_store_never_echoes_a_malformed_url() -> None:
    pytest.importorskip("psycopg")
    from engram_mcp.reference._config import StoreUnavailable
    from engram_mcp.reference._postgres import PostgresStore

    with pytest.raises(StoreUnavailable) as refused:
        PostgresStore("postgresql://app:s3cretPW@[::1/memory", background=False)
    assert "s3cretPW" not in str(refused.value) and refused.value.__cause__ is None


def test_a_misspelt_scope_setting_is_refused(make_reference_dir: Any) -> None:
    """An authority key spelt wrong would otherwise be ignored, and the capture it meant to deny allowed."""
    ref = make_reference_dir()
    ref.edit(lambda data: data["scopes"][0].update(capture_denied_principal=["alice"]))
    with pytest.raises(ConfigError, match="unknown setting 'capture_denied_principal'"):
        load_config(ref.config)


def test_init_with_a_postgresql_store_writes_its_timing_keys_and_the_loader_reads_them(tmp_path: Any) -> None:
    from engram_mcp.reference._init import write_configuration
    from engram_mcp.reference._store_config import PostgresSettings

    write_configuration(tmp_path, seed="s", store_url="postgresql://db.internal/memory")
    written = (tmp_path / "server.toml").read_text(encoding="utf-8")
    defaults = PostgresSettings()
    assert f"erasure_batch_seconds = {defaults.erasure_batch_seconds:g}" in written
    assert f"unavailable_after_seconds = {defaults.unavailable_after_seconds:g}" in written
    assert load_config(tmp_path / "server.toml").postgres == defaults


@pytest.mark.parametrize("key", ["erasure_batch_seconds", "unavailable_after_seconds"])
@pytest.mark.parametrize("value", [0, -1, True, "10", 10**6])
def test_an_unusable_store_timing_is_refused_by_name(make_reference_dir: Any, key: str, value: Any) -> None:
    ref = make_reference_dir()
    ref.edit(lambda data: data.update(store={"url": "postgresql://db.internal/memory", key: value}))
    with pytest.raises(ConfigError, match=f"store: '{key}'"):
        load_config(ref.config)


def test_a_store_timing_is_read(make_reference_dir: Any) -> None:
    ref = make_reference_dir()
    ref.edit(lambda data: data.update(store={"url": "postgresql://db.internal/memory", "erasure_batch_seconds": 2,
                                             "unavailable_after_seconds": 7}))
    settings = load_config(ref.config).postgres
    assert (settings.erasure_batch_seconds, settings.unavailable_after_seconds) == (2.0, 7.0)


def readme_table_defaults() -> dict[str, str]:
    """Each configuration key the README's tables name (first column), with the default they give (second)."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(?:\[[^\]]+\] )?([a-z_]+)` \| ([^|]*) \|", text, re.M)
    return {key: default.strip() for key, default in rows}


def test_the_readme_tables_give_every_transport_and_store_default() -> None:
    from dataclasses import fields

    from engram_mcp.reference._config import TransportConfig
    from engram_mcp.reference._store_config import PostgresSettings

    documented = readme_table_defaults()
    for settings in (TransportConfig(), PostgresSettings()):
        for field in fields(settings):
            assert field.name in documented, f"the README does not document {field.name}"
            value = getattr(settings, field.name)
            assert documented[field.name] == (f"{value:g}" if isinstance(value, float) else str(value)), field.name
