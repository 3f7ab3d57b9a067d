"""Versioned schema migrations. The version lives in ``PRAGMA user_version``.

``MIGRATIONS[i]`` takes a store from version ``i`` to ``i + 1``. Never edit a released migration:
append a new one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from sqlalchemy.schema import CreateIndex, CreateTable

from . import schema

#: 'WBN1' - marks a SQLite file as a Workbench store.
APPLICATION_ID = 0x57424E31


def _v1(conn: sqlite3.Connection) -> None:
    from sqlalchemy.dialects import sqlite as sqlite_dialect

    dialect = sqlite_dialect.dialect()
    for table in schema.metadata.sorted_tables:
        conn.execute(str(CreateTable(table).compile(dialect=dialect)))
        for index in table.indexes:
            conn.execute(str(CreateIndex(index).compile(dialect=dialect)))
    for stmt in _V1_EXTRA.split(";"):
        if stmt.strip():
            conn.execute(stmt)


_V1_EXTRA = """
        CREATE UNIQUE INDEX ix_rollout_slot ON rollout(run_id, task_index, sample_index);
        CREATE INDEX ix_rollout_env_created ON rollout(env_name, created_at);
        CREATE INDEX ix_rollout_reward ON rollout(reward);
        CREATE INDEX ix_rollout_error_kind ON rollout(error_kind) WHERE error_kind IS NOT NULL;
        CREATE INDEX ix_rollout_model ON rollout(model);
        CREATE INDEX ix_rollout_run_reward ON rollout(run_id, reward);
        CREATE INDEX ix_score_name ON score(name, rollout_pk);
        CREATE VIRTUAL TABLE rollout_fts USING fts5(text, content='', tokenize='unicode61 remove_diacritics 2');
        """


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1]
SCHEMA_VERSION = len(MIGRATIONS)
