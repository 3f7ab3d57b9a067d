"""Versioned schema migrations. The version lives in ``PRAGMA user_version``.

A new store is created at :data:`SCHEMA_VERSION` from the models of ``schema.py`` (:func:`create_schema`
runs ``sql/schema.sql``, generated from them). A store written by an older version is taken from its
version ``i`` to ``i + 1`` by ``MIGRATIONS[i]``, frozen SQL, to the same schema (a test compares the two).
Never edit a released migration: change the model, append a migration, regenerate ``sql/schema.sql``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

#: 'WBN1' - marks a SQLite file as a Workbench store.
APPLICATION_ID = 0x57424E31
#: The models' DDL (``scripts/gen_schema_sql.py`` writes it from ``schema.py``).
SCHEMA_SQL = Path(__file__).parent / "sql" / "schema.sql"


def _run_sql_file(conn: sqlite3.Connection, name: str) -> None:
    """Run one frozen migration script (statements end with ';' at the end of a line)."""
    text = (Path(__file__).parent / "sql" / name).read_text()
    for stmt in text.split(";\n"):
        if stmt.strip():
            conn.execute(stmt)


def _v1(conn: sqlite3.Connection) -> None:
    """The first schema: frozen SQL, so later edits of schema.py never change what v1 creates."""
    _run_sql_file(conn, "v1.sql")


def _v2(conn: sqlite3.Connection) -> None:
    """Token-exact traces: one packed row per rollout."""
    _run_sql_file(conn, "v2.sql")


def _v3(conn: sqlite3.Connection) -> None:
    """Indexes for the trace browser (slowest-first sorting, per-environment paging); drop unused ones."""
    _run_sql_file(conn, "v3.sql")


def _v4(conn: sqlite3.Connection) -> None:
    """Training runs: one row per optimizer step, skipped step, held-out eval or event."""
    _run_sql_file(conn, "v4.sql")


def _v5(conn: sqlite3.Connection) -> None:
    """Re-scoring: a record per applied re-score (env version, summary) and each rollout's new scores,
    kept beside the original ones, which are never overwritten."""
    _run_sql_file(conn, "v5.sql")


def _v6(conn: sqlite3.Connection) -> None:
    """The trace browser's count of an environment's rollouts in a reward range, from the index alone."""
    _run_sql_file(conn, "v6.sql")


def _v7(conn: sqlite3.Connection) -> None:
    """Where each rollout came from (``source``): ``model`` (an eval or training run; every older row),
    ``imported`` (``workbench import``) or ``human`` (a person as the policy), indexed for the trace browser."""
    _run_sql_file(conn, "v7.sql")


def _v8(conn: sqlite3.Connection) -> None:
    """Runs listed by kind, newest first (``workbench runs --kind``, the default listing of the user's own
    runs); the probe and ``validate`` runs that older versions stored as kind ``probe`` stay so."""
    _run_sql_file(conn, "v8.sql")


def _v9(conn: sqlite3.Connection) -> None:
    """Feedback from a product on the answers the gateway served (``POST /v1/feedback``)."""
    _run_sql_file(conn, "v9.sql")


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8, _v9]
SCHEMA_VERSION = len(MIGRATIONS)


def create_schema(conn: sqlite3.Connection) -> None:
    """Create the current schema in an empty store: the tables and indexes the models declare."""
    _run_sql_file(conn, SCHEMA_SQL.name)
