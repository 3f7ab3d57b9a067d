"""The store's schema: migrations, the declared tables and the refusal of foreign files agree."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from workbench.errors import StoreError
from workbench.store import SCHEMA_VERSION, Store
from workbench.store.migrations import APPLICATION_ID
from workbench.store.schema import metadata


def test_migrated_tables_match_declared_models(tmp_path: Path) -> None:
    Store(tmp_path / "s.db").close()
    conn = sqlite3.connect(tmp_path / "s.db")
    for table in metadata.sorted_tables:
        cols = {r[1] for r in conn.execute(f"PRAGMA table_info({table.name})")}
        assert cols == {c.name for c in table.columns}, table.name
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # FTS5 over message text exists.
    conn.execute("INSERT INTO rollout_fts(rowid, text) VALUES (1, 'hello world')")
    assert conn.execute("SELECT rowid FROM rollout_fts WHERE rollout_fts MATCH 'hello'").fetchall() == [(1,)]


def test_reopening_is_idempotent_and_keeps_data(tmp_path: Path) -> None:
    p = tmp_path / "s.db"
    with Store(p) as s:
        s.set_price("my-model", 1.0, 2.0)
    with Store(p) as s:
        assert s.prices()["my-model"].output_usd_per_mtok == 2.0
        assert "gpt-4o-mini*" in s.prices()


def test_refuses_text_file(tmp_path: Path) -> None:
    p = tmp_path / "notes.db"
    p.write_text("these are my notes, not a database\n" * 50)
    with pytest.raises(StoreError, match="not a Workbench store"):
        Store(p)
    assert p.read_text().startswith("these are my notes")


def test_refuses_foreign_sqlite_and_newer_version(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.db"
    c = sqlite3.connect(foreign)
    c.execute("CREATE TABLE customers (id INTEGER)")
    c.commit()
    c.close()
    with pytest.raises(StoreError, match="not a Workbench store"):
        Store(foreign)
    newer = tmp_path / "newer.db"
    Store(newer).close()
    c = sqlite3.connect(newer)
    c.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    c.commit()
    c.close()
    with pytest.raises(StoreError, match="newer Workbench"):
        Store(newer)


def test_run_defaults_mirror_the_declared_run_table() -> None:
    from workbench.store import RUN_DEFAULTS
    from workbench.store.schema import RunRow

    declared = {name: f.default for name, f in RunRow.model_fields.items() if name != "id"}
    assert set(RUN_DEFAULTS) == set(declared)
    for name, default in declared.items():
        if RunRow.model_fields[name].is_required():
            continue  # required in the model: every caller passes it (the store fills in created_at)
        assert RUN_DEFAULTS[name] == default, name


def test_opening_a_store_does_not_import_sqlmodel() -> None:
    import subprocess
    import sys

    code = ("import sys, tempfile, os; from workbench.store import Store; "
            "Store(os.path.join(tempfile.mkdtemp(), 's.db')).close(); print('sqlmodel' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
