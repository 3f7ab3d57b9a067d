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


def describe(conn: sqlite3.Connection) -> dict[str, object]:
    """A store's schema in effect: each table's columns (type, NOT NULL, default, key), foreign keys and
    rowid, each index's table, uniqueness, columns and condition, the virtual tables and triggers; not
    the order the statements ran in or how their text is laid out."""
    def squeeze(sql: str | None) -> str:
        return " ".join((sql or "").replace("(", " ( ").replace(")", " ) ").replace(",", " , ").split())

    out: dict[str, object] = {}
    objects = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
                           "AND name NOT LIKE 'rollout_fts_%' ORDER BY type, name").fetchall()
    for kind, name, table, sql in objects:
        if kind == "table" and sql.upper().startswith("CREATE VIRTUAL"):
            out[f"virtual {name}"] = squeeze(sql)
        elif kind == "table":
            listed = conn.execute("SELECT type, wr, strict FROM pragma_table_list WHERE name = ?", (name,)).fetchone()
            out[f"table {name}"] = {
                "columns": conn.execute(f"PRAGMA table_xinfo({name})").fetchall(),
                "foreign keys": conn.execute(f"PRAGMA foreign_key_list({name})").fetchall(),
                "without rowid, strict": listed[1:],
                "indexes": sorted((r[1], r[2], r[3], r[4], conn.execute(f"PRAGMA index_xinfo('{r[1]}')").fetchall())
                                  for r in conn.execute(f"PRAGMA index_list({name})")
                                  if not r[1].startswith("sqlite_autoindex")),
                "unique constraints": sorted(conn.execute(f"PRAGMA index_xinfo('{r[1]}')").fetchall()
                                             for r in conn.execute(f"PRAGMA index_list({name})")
                                             if r[1].startswith("sqlite_autoindex")),
            }
        elif kind == "index":
            where = squeeze(sql).partition(" WHERE ")[2] if sql else ""
            out[f"index {name}"] = (table, where)
        else:
            out[f"{kind} {name}"] = (table, squeeze(sql))
    return out


def _migrated(path: Path, upto: int = SCHEMA_VERSION) -> sqlite3.Connection:
    """A store made the way an older version's store reaches this one: each migration in turn."""
    from workbench.store.migrations import MIGRATIONS

    conn = sqlite3.connect(path, isolation_level=None)
    for i, migrate in enumerate(MIGRATIONS[:upto]):
        migrate(conn)
        conn.execute(f"PRAGMA user_version={i + 1}")
    return conn


def test_a_new_store_is_created_from_the_models_as_an_old_one_is_migrated(tmp_path: Path) -> None:
    """The schema created from the SQLModel declarations and the one the migrations reach are the same
    in effect: a model that disagrees with the migrations (a column, a type, a default, an index) fails here."""
    Store(tmp_path / "new.db").close()
    created = describe(sqlite3.connect(tmp_path / "new.db"))
    migrated = describe(_migrated(tmp_path / "old.db"))
    assert created == migrated
    assert {k.split()[1] for k in created if k.startswith("table ")} == {t.name for t in metadata.sorted_tables}
    assert "virtual rollout_fts" in created and "index ix_rollout_error_kind" in created
    assert created["index ix_rollout_error_kind"] == ("rollout", "error_kind IS NOT NULL")
    assert created["table rescore_rollout"]["without rowid, strict"] == (1, 0)  # type: ignore[index]


def test_the_comparison_sees_a_model_and_migrations_that_disagree(tmp_path: Path) -> None:
    """One migration short (v6: no rollout.source, no index on it) is a different schema; so is a store
    with a column of another default."""
    Store(tmp_path / "new.db").close()
    created = describe(sqlite3.connect(tmp_path / "new.db"))
    short = describe(_migrated(tmp_path / "v6.db", 6))
    assert short != created
    assert "index ix_rollout_source" in created and "index ix_rollout_source" not in short
    other = sqlite3.connect(tmp_path / "other.db", isolation_level=None)
    from workbench.store.schema import create_statements

    for stmt in create_statements():
        other.execute(stmt.replace("DEFAULT 'model'", "DEFAULT 'human'"))
    assert describe(other) != created


def test_schema_sql_is_generated_from_the_models() -> None:
    """``sql/schema.sql``, what a new store runs, is what the models render (``scripts/gen_schema_sql.py``)."""
    from workbench.store.migrations import SCHEMA_SQL
    from workbench.store.schema import schema_sql

    assert SCHEMA_SQL.read_text() == schema_sql(), "run python scripts/gen_schema_sql.py"


def test_existing_stores_of_every_version_migrate_to_the_current_schema(tmp_path: Path) -> None:
    """A store left at each older version, holding a rollout, opens: migrated to the current schema, the
    rollout kept (with the default source)."""
    Store(tmp_path / "new.db").close()
    created = describe(sqlite3.connect(tmp_path / "new.db"))
    for version in range(1, SCHEMA_VERSION):
        path = tmp_path / f"v{version}.db"
        conn = _migrated(path, version)
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute("INSERT INTO run (id, kind, env_name, env_version, env_source, env_args, model, base_url, harness, "
                     "runtime, n_tasks, rollouts_per_task, concurrency, sampling, config, status, error, created_at, "
                     "summary) VALUES ('r1', 'eval', 'e', '', '', '{}', 'm', '', '', '', 1, 1, 1, '{}', '{}', "
                     "'completed', '', 0, '{}')")
        conn.execute("INSERT INTO rollout (id, run_id, env_name, model, task_id, task_index, sample_index, status, "
                     "prompt_tokens, completion_tokens, cost_usd, duration_s, turns, created_at, prompt, answer, info, "
                     "completion, messages, state) VALUES ('r1.0.0', 'r1', 'e', 'm', 't', 0, 0, 'ok', 0, 0, 0, 0, 1, "
                     "0, '', 'null', '{}', '', '[]', '{}')")
        conn.close()
        with Store(path) as s:
            assert s.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
            assert [tuple(r) for r in s.conn.execute("SELECT id, source FROM rollout")] == [("r1.0.0", "model")]
        assert describe(sqlite3.connect(path)) == created, f"a v{version} store"
