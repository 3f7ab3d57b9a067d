"""Opening a store: file checks, pragmas, migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from workbench.errors import StoreError
from workbench.store.migrations import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION


def connect(path: Path | str, *, readonly: bool = False) -> sqlite3.Connection:
    """A connection with the store's pragmas (WAL, NORMAL sync, busy timeout)."""
    uri = f"file:{Path(path)}?mode=ro" if readonly else f"file:{Path(path)}"
    conn = sqlite3.connect(uri, uri=True, timeout=30.0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=30000")
    if not readonly:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute("PRAGMA cache_size=-65536")
    conn.execute("PRAGMA temp_store=MEMORY")
    conn.execute("PRAGMA mmap_size=268435456")
    return conn


def open_store_file(path: Path | str) -> Path:
    """Create or migrate the store at ``path``; refuse files that are not Workbench stores."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise StoreError(f"--db {p} is a directory; give a file path such as {p / 'workbench.db'}")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create the store's directory {p.parent}: {e.strerror}") from None
    try:
        # A plain connection for the checks: a file we refuse must be left exactly as it was (no WAL switch).
        conn = sqlite3.connect(f"file:{p}", uri=True, timeout=30.0, isolation_level=None)
        conn.execute("PRAGMA busy_timeout=30000")
    except sqlite3.DatabaseError as e:
        raise StoreError(f"{p} is not a Workbench store ({e}); pass another --db or remove the file") from None
    try:
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{p} is not a Workbench store ({e}); pass another --db or remove the file") from None
        if app_id != APPLICATION_ID and tables:
            shown = ", ".join(tables[:4])
            raise StoreError(f"{p} is a SQLite file but not a Workbench store (it has tables: {shown}); pass another --db")
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{p} was written by a newer Workbench (store schema v{version}; this version reads up to "
                f"v{SCHEMA_VERSION}); upgrade rl-workbench or pass another --db"
            )
        conn.execute("PRAGMA journal_mode=WAL")
        if app_id != APPLICATION_ID:
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        if version < SCHEMA_VERSION:
            _migrate(conn, version)
    finally:
        conn.close()
    return p


def _migrate(conn: sqlite3.Connection, start: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have migrated while we waited for the lock.
        current = conn.execute("PRAGMA user_version").fetchone()[0]
        for i in range(current, SCHEMA_VERSION):
            MIGRATIONS[i](conn)
            conn.execute(f"PRAGMA user_version={i + 1}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
